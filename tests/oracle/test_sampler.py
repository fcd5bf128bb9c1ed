"""Oracle: zerotune's DistributedSampler (src/data/sampler.cpp) against torch's
torch.utils.data.DistributedSampler over a grid of n x world size x seed x epoch x shuffle x
drop_last, every rank's list compared whole.

The lists come from torch; the C++ side is the unit-test executable's sampler/matches_torch_output
case, which reads them from the JSON file named by ZT_SAMPLER_CASES. That executable is found
next to --zerotune (BUILD/tests/zt_unit_tests) or given with --unit-tests.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402 (exits with a clear message when a package is missing)
import torch  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

SIZES = [1, 2, 7, 10, 100, 1000, 12345]
WORLD_SIZES = [1, 2, 3, 4, 8]
SEEDS = [0, 42, 1234]
EPOCHS = [0, 1, 5]


def torch_cases():
    cases = []
    for n in SIZES:
        for world_size in WORLD_SIZES:
            for seed in SEEDS:
                for epoch in EPOCHS:
                    for shuffle in (True, False):
                        for drop_last in (False, True):
                            ranks = []
                            for rank in range(world_size):
                                sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank,
                                                             shuffle=shuffle, seed=seed, drop_last=drop_last)
                                sampler.set_epoch(epoch)
                                ranks.append(list(sampler))
                            cases.append(dict(n=n, world_size=world_size, seed=seed, epoch=epoch,
                                              shuffle=shuffle, drop_last=drop_last, ranks=ranks))
    return cases


def main():
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--zerotune", required=True, help="path of the zerotune executable")
    parser.add_argument("--unit-tests", help="path of zt_unit_tests (default: next to --zerotune)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    unit_tests = args.unit_tests or os.path.join(os.path.dirname(os.path.abspath(args.zerotune)), "tests",
                                                 "zt_unit_tests")
    report = oc.Report(f"sampler vs torch {torch.__version__} DistributedSampler")
    if not report.check(os.access(unit_tests, os.X_OK), f"unit-test executable {unit_tests} exists"):
        return report.finish()

    cases = torch_cases()
    rank_lists = sum(case["world_size"] for case in cases)
    with oc.temporary_directory(args, "zt-sampler-") as tmp:
        path = os.path.join(tmp, "sampler_cases.json")
        with open(path, "w") as f:
            json.dump({"cases": cases}, f)
        result = subprocess.run([unit_tests, "--run_test=sampler/matches_torch_output", "--log_level=message",
                                 "--color_output=no"],
                                env=dict(os.environ, ZT_SAMPLER_CASES=path), capture_output=True, text=True,
                                timeout=300)
        output = result.stdout + result.stderr
        report.check(result.returncode == 0, f"zt_unit_tests exit status {result.returncode} (0 expected)")
        match = re.search(r"compared (\d+) rank lists of (\d+) torch sampler cases from .*, (\d+) mismatched", output)
        report.check(match is not None, "the unit test reports how many torch lists it compared")
        if match:
            report.check(int(match.group(1)) == rank_lists and int(match.group(2)) == len(cases),
                         f"compared {match.group(1)} rank lists of {match.group(2)} cases "
                         f"(expected {rank_lists} of {len(cases)})")
            report.check(match.group(3) == "0", f"{match.group(3)} rank lists differ from torch's")
        if report.failures:
            print(output[-6000:])
    return report.finish()


if __name__ == "__main__":
    oc.main_guard(main)
