"""What every layer may use, importing no other symgrad module but these: pytrees, progress bars, callable
modules, and the hook through which Dask arrays reach ``symgrad.distributed`` (``chunks``)."""
