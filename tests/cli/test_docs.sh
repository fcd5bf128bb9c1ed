#!/usr/bin/env bash
# tests/cli/test_docs.sh: the README and docs/*.md match the program (issue 35 item 9).
#  1. Every `zerotune <command>` they show (in code blocks and `code` spans) is a command:
#     `zerotune <command> --help` succeeds.
#  2. Every --flag on such a command line is one of that command's options (from its --help);
#     every other --flag they show is an option of some command or of a named outside tool
#     (mpirun, spm_train, sbatch, ...: EXTERNAL below); the flags the docs say do not exist
#     (ABSENT) are no command's option.
#  3. The README's command lines outside the tour (tests/cli/test_tour.sh runs the tour) run, on
#     the tour's tiny model and data: build/zerotune, .venv/bin/python and /tmp/zt-tour replaced
#     as the tour test does, /models/llama-2-7b-hf by the config-only llama-2-7b of
#     job_scripts/deepspeed-chat/models (the same shapes). Lines whose inputs are placeholders
#     (OUT, BASE, `...`, a data set the README tells the reader to download) are listed as not
#     run. To stay within seconds, train lines without --max-steps get --max-steps 2, autotune
#     lines get small search limits and --max-seq-len searches a short --seq-len-limit (flags the
#     line does not give itself); mpirun lines run with OMP_NUM_THREADS=1 (their ranks
#     oversubscribe the cores here).
# Usage: test_docs.sh ZEROTUNE_BINARY PYTHON
set -uo pipefail
ZEROTUNE="$1"
PYTHON="$2"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# The tour's model and data, made by the tour's own first lines (init, tokenizer, prep).
tour="$(awk '/<!-- tour:begin -->/ {on = 1; next} /<!-- tour:end -->/ {on = 0} on' "$REPO/README.md" | grep -v '^```')"
setup="$(awk '/ train / {exit} {print}' <<<"$tour")"
setup="${setup//build\/zerotune/$ZEROTUNE}"
setup="${setup//.venv\/bin\/python/$PYTHON}"
setup="${setup//\/tmp\/zt-tour/$WORK/tour}"
(cd "$REPO" && bash -euo pipefail -c "$setup") >"$WORK/setup.log" 2>&1 || { cat "$WORK/setup.log"; fatal "the tour's set-up lines failed"; }

# What the README says of logs: ranks started by mpirun print plain lines, no progress bar's
# "\r" or "\e[K", also when mpirun's output goes to a file (the ranks' stdout is a pty then).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 1 --oversubscribe "$ZEROTUNE" train --model "$WORK/tour/model" --data "$WORK/tour/data" --out "$WORK/log-run" \
  --max-steps 3 --log-every 1 >"$WORK/log-run.log" 2>&1
status=$?
[[ "$status" -eq 0 ]] && grep -q "^step 3/3 " "$WORK/log-run.log" && ! grep -q $'\e\\[K\|\r' "$WORK/log-run.log"
check mpirun-log-without-escapes $? "$WORK/log-run.log" "want exit 0 (got $status), the step lines and no \\r or \\e[K in the log"
failures_before_python=$failures

"$PYTHON" - "$ZEROTUNE" "$PYTHON" "$REPO" "$WORK" <<'PY'
import os, re, shlex, subprocess, sys, time

zerotune, python, repo, work = sys.argv[1:5]
docs = [os.path.join(repo, "README.md")] + sorted(
    os.path.join(repo, "docs", name) for name in os.listdir(os.path.join(repo, "docs")) if name.endswith(".md"))
failures, cases = 0, 0

def check(name, ok, detail=""):
    global failures, cases
    cases += 1
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail))
    failures += 0 if ok else 1

# Flags of other programs that the docs show, and the program.
EXTERNAL = {
    "--oversubscribe": "mpirun", "--bind-to": "mpirun", "--cpu-bind": "srun", "--gpu-bind": "srun", "--mpi": "srun",
    "--cpus-per-task": "sbatch", "--ntasks-per-node": "sbatch", "--export": "sbatch", "--time": "sbatch",
    "--signal": "sbatch", "--requeue": "sbatch", "--open-mode": "sbatch", "--nodes": "sbatch",
    "--dependency": "sbatch", "--kill-on-invalid-dep": "sbatch",
    "--capture-range": "nsys", "--capture-range-end": "nsys", "--input": "spm_train", "--minloglevel": "spm_train",
    "--test-dir": "ctest", "--output-on-failure": "ctest", "--build": "cmake", "--no-apt": "scripts/setup.sh",
    "--no-build": "scripts/setup.sh", "--cuda-arch": "scripts/offline_bundle.sh", "--style": "make_bpe_tokenizer.py",
    "--files": "make_bpe_tokenizer.py", "--help": "every command", "--logdir": "tensorboard",
}
# Flags the docs name as not implemented: they must stay absent.
ABSENT = set()
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w])")  # underscores: another tool's (spm_train --bos_id)

def code_of(text):
    """(kind, code) of every fenced block (backslash-continued lines joined) and inline span."""
    out = []
    for i, part in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if i % 2:
            out += [("block", line) for line in part.replace("\\\n", " ").splitlines()]
        else:
            out += [("span", span) for span in re.findall(r"`([^`\n]+)`", part)]
    return out

def run(args, timeout=60):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)

# The commands, from `zerotune --help`, and each one's options, from its --help.
usage = run([zerotune, "--help"]).stdout
commands = re.findall(r"^  ([a-z]+) ", usage.split("commands:")[1], flags=re.M)
options = {}
for command in commands:
    result = run([zerotune, command, "--help"])
    options[command] = set(re.findall(r"^  (?:-\w \[ )?(--[a-z0-9-]+)", result.stdout, flags=re.M))
    check(f"command-help:{command}", result.returncode == 0 and bool(options[command]), result.stderr[-300:])
every_option = set().union(*options.values())

# 1 and 2: commands and flags.
ZT_LINE = re.compile(r"(?:^|[\s/])zerotune(?:-emu)? +([a-z][a-z-]*)(.*)")
SPAN_COMMAND = re.compile(r"^([a-z]+)( --.*)")
on_command_line, elsewhere = {}, {}
for path in docs:
    name = os.path.relpath(path, repo)
    for kind, code in code_of(open(path).read()):
        match = ZT_LINE.search(code) or (SPAN_COMMAND.match(code) if kind == "span" else None)
        if match and (match.group(1) in commands or ZT_LINE.search(code)):
            command, rest = match.group(1), re.split(r"\||&&|;|\s#|\$\(", match.group(2))[0]
            on_command_line.setdefault((command, name), set()).update(FLAG.findall(rest))
            code = code.replace(rest, "")
        for flag in FLAG.findall(code):
            elsewhere.setdefault(flag, set()).add(name)
for (command, name), flags in sorted(on_command_line.items()):
    if command not in commands:
        check(f"command:{command} ({name})", False, f"`zerotune {command}` is not a command ({', '.join(commands)})")
        continue
    wrong = sorted(f for f in flags - options[command] if f not in ABSENT)
    check(f"flags:{name}:{command}", not wrong, f"not options of `zerotune {command}`: {' '.join(wrong)}")
for flag, names in sorted(elsewhere.items()):
    if flag in ABSENT:
        check(f"absent:{flag}", flag not in every_option, f"the docs say it does not exist, but a command takes it")
    else:
        check(f"flag:{flag}", flag in every_option or flag in EXTERNAL,
              f"in {', '.join(sorted(names))}: no command takes it and it is not a listed outside tool's flag")
for flag in ABSENT:
    for (command, name), flags in on_command_line.items():
        if flag in flags:
            check(f"absent:{command} {flag}", flag not in options.get(command, set()), "the docs say it does not exist")

# 3: the README's command lines outside the tour.
readme = open(os.path.join(repo, "README.md")).read()
readme = re.sub(r"<!-- tour:begin -->.*?<!-- tour:end -->", "", readme, flags=re.S)
SUBSTITUTE = [("build/zerotune", zerotune), (".venv/bin/python", python), ("/tmp/zt-tour", os.path.join(work, "tour")),
              ("/models/llama-2-7b-hf", "job_scripts/deepspeed-chat/models/llama-2-7b")]
INPUTS = {"--model", "--data", "--tokenizer", "--input", "--checkpoint", "--deepspeed", "--config", "--adapter"}
# Limits that keep a line within seconds, added when the line does not give the flag itself.
LIMITS = {"train": [("--max-steps", "2")],
          "autotune": [("--max-micro-batch", "2"), ("--trial-steps", "2"), ("--stages", "0"),
                       ("--checkpointing", "off"), ("--no-offload", None)],
          "estimate": [("--seq-len-limit", "2048")]}
started = time.time()
for kind, line in code_of(readme):
    if kind != "block" or "build/zerotune" not in line:
        continue
    line = line.split(" #")[0].strip()
    for before, after in SUBSTITUTE:
        line = line.replace(before, after)
    words = shlex.split(line)
    command = words[words.index(zerotune) + 1]
    missing = [words[i + 1] for i, word in enumerate(words[:-1])
               if word in INPUTS and not os.path.exists(os.path.join(repo, words[i + 1]))]
    if command == "inspect":
        missing += [w for w in words[words.index(zerotune) + 2:][:1] if not os.path.exists(os.path.join(repo, w))]
    if "..." in words or missing:
        print(f"not run (its inputs are placeholders: {' '.join(missing) or '...'}): {line}")
        continue
    for flag, value in LIMITS.get(command, []):
        if flag == "--seq-len-limit" and "--max-seq-len" not in words:
            continue
        if flag not in words:
            words += [flag] + ([value] if value else [])
    if "--out" in words:
        os.makedirs(os.path.dirname(words[words.index("--out") + 1]), exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if words[0] == "mpirun":  # oversubscribed ranks: one thread each, or 4 ranks take 10x as long
        env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(words, cwd=repo, capture_output=True, text=True, timeout=120, env=env)
    check(f"readme-line: {' '.join(words[words.index(zerotune):][:2])} {' '.join(words[words.index(zerotune) + 2:])[:60]}",
          result.returncode == 0, (result.stdout + result.stderr)[-800:])
print(f"the README's lines took {time.time() - started:.1f} s")
print(f"{cases - failures} of {cases} cases passed")
sys.exit(1 if failures or not cases else 0)
PY
python_status=$?
[[ "$python_status" -eq 0 && "$failures_before_python" -eq 0 ]]
