"""A token shard whose sample lengths follow another shard's (bench/packing.sh): N samples of
random ids whose lengths are drawn with replacement from the lengths of the source shard (the
rm-static sample tokenized with `zerotune prep`), so a larger data set has rm-static's length
distribution. Usage: packing_lengths.py SOURCE_DIR OUT_DIR N SEED"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
from make_token_shard import read_shard, write_shard  # noqa: E402


def main():
    source, out, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lengths = []
    attributes = None
    for name in sorted(os.listdir(source)):
        if name.endswith(".h5"):
            samples, attributes = read_shard(os.path.join(source, name))
            lengths += [len(tokens) for tokens, _ in samples]
    rng = np.random.default_rng(seed)
    vocab = int(attributes["vocab_size"])
    samples = []
    for length in rng.choice(np.asarray(lengths), size=count, replace=True):
        tokens = [1] + list(rng.integers(4, vocab, size=int(length) - 1))
        mask = [0] * (int(length) // 3) + [1] * (int(length) - int(length) // 3)
        samples.append((tokens, mask))
    os.makedirs(out, exist_ok=True)
    write_shard(os.path.join(out, "train-00000.h5"), samples, vocab, pad_id=int(attributes["pad_id"]),
                max_seq_len=int(attributes["max_seq_len"]), tokenizer_sha256=attributes["tokenizer_sha256"])
    print(f"{count} samples, lengths drawn from {len(lengths)} of {source}: mean {np.mean(lengths):.0f}, "
          f"max {max(lengths)}")


if __name__ == "__main__":
    main()
