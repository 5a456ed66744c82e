"""Authenticated JSON-lines connections: the challenge-response handshake, framing, a server
that caps what strangers may hold (:mod:`.server`), a client that retries a busy server
(:mod:`.wire`), and the messages every such connection shares (:mod:`.messages`).

The rank protocol (``elastic/``) and the controller's agent link (``controller/``) both run on
it; it knows neither.
"""
