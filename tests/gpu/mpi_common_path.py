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


def worst_relative_error(got, ref, skip=(), norm=False):
    """(name, error) of the tensor of `ref` whose largest |got - ref| is the largest fraction of
    its own largest magnitude (names in `skip` left out): a dump of the GPU against the CPU's.
    norm=True: ||got - ref|| / ||ref|| per tensor instead (the bf16 comparisons of ReLU models,
    where one activation rounding to the other side of zero on one backend moves a single token's
    term, about 1/sqrt(tokens) of a gradient row, and so the largest element, but not the norm)."""
    worst_name, worst = "", 0.0
    for key in ref:
        if key in skip:
            continue
        difference, reference = got[key].float() - ref[key].float(), ref[key].float()
        if norm:
            error = float(difference.norm()) / max(float(reference.norm()), 1e-30)
        else:
            error = float(difference.abs().max()) / max(float(reference.abs().max()), 1e-30)
        if error > worst:
            worst_name, worst = key, error
    return worst_name, worst
