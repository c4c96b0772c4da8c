"""The GPU path's parts below its commands: the quick check's parts (parts) and the estimated cost of
a GPU run and of the d12 test (cost). The commands are python -m xsa.gpu_check and xsa.gpu_study."""
