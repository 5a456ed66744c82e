"""Example training applications for the elastic runtime (importable by ranks)."""
