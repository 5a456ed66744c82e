"""parsl-malleable: train DNNs on the idle nodes that FCFS + backfill scheduling leaves behind.

Data flows one way: ``traces -> sim -> windows -> allocate -> provider/controller -> elastic``.
Heavy submodules (torch, parsl) are imported lazily so that ``import parsl_malleable`` stays cheap.
"""

__version__ = "0.1.0"
