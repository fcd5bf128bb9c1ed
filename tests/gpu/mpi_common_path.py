# Puts tests/mpi on sys.path so the GPU scripts reuse its helpers (mpi_common.py).
import os
import sys

MPI_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi")
if MPI_TESTS not in sys.path:
    sys.path.insert(0, MPI_TESTS)


def add_mpi_path():
    """Importing this module already did it; kept for an explicit import site."""
    return MPI_TESTS
