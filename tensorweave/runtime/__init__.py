"""Devices, the executor, Session and tw.function (thin shells over the one executor)."""
