"""Cython kernels of fastq. Import them only through ``fastq._accel``."""
