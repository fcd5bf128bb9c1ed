# Puts tests/mpi on sys.path so the GPU scripts reuse its helpers (mpi_common.py); and the one
# comparison of two step-0 dumps the GPU scripts share.
import os
import sys

MPI_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mpi")
if MPI_TESTS not in sys.path:
    sys.path.insert(0, MPI_TESTS)


def add_mpi_path():
    """Importing this module already did it; kept for an explicit import site."""
    return MPI_TESTS


def worst_relative_error(got, ref, skip=()):
    """(name, error) of the tensor of `ref` whose largest |got - ref| is the largest fraction of
    its own largest magnitude (names in `skip` left out): a dump of the GPU against the CPU's."""
    worst_name, worst = "", 0.0
    for key in ref:
        if key in skip:
            continue
        scale = max(float(ref[key].abs().max()), 1e-30)
        error = float((got[key].float() - ref[key].float()).abs().max()) / scale
        if error > worst:
            worst_name, worst = key, error
    return worst_name, worst
