"""Writes (and reads) zerotune token shards with h5py, in exactly the format of DESIGN.md
("Tokenized dataset (HDF5)") that src/data/token_shards.cpp reads and writes.

As a module (other oracle tests and the README tour use it):
    from make_token_shard import write_shard, random_samples, read_shard
    write_shard("d/train-00000.h5", [(tokens, loss_mask), ...], vocab_size=128)
As a command:
    python make_token_shard.py --out DIR --samples N --vocab V --min-len a --max-len b --seed s
writes N random samples to DIR/train-00000.h5: BOS, random ids, EOS; the first third of each
sample (the "prompt") has loss_mask 0, the rest 1.
"""
import argparse
import os

import h5py
import numpy as np

FORMAT = "zerotune-tokens"
VERSION = 1


def write_shard(path, samples, vocab_size, bos_id=1, eos_id=2, pad_id=0, max_seq_len=None,
                split="train", source="test", tokenizer_sha256="0" * 64):
    """samples: list of (tokens, loss_mask), each a sequence of ints of the same length >= 1.
    max_seq_len defaults to the longest sample. Written to path + ".tmp", then renamed."""
    if not samples:
        raise ValueError(f"{path}: a token shard must hold at least one sample")
    lengths = []
    for i, (tokens, loss_mask) in enumerate(samples):
        if len(tokens) != len(loss_mask) or len(tokens) == 0:
            raise ValueError(f"{path}: sample {i} has {len(tokens)} tokens and {len(loss_mask)} mask values")
        lengths.append(len(tokens))
    if max_seq_len is None:
        max_seq_len = max(lengths)
    tokens = np.concatenate([np.asarray(t, dtype=np.int32) for t, _ in samples])  # [T]
    loss_mask = np.concatenate([np.asarray(m, dtype=np.uint8) for _, m in samples])  # [T]
    offsets = np.zeros(len(samples) + 1, dtype=np.int64)  # [N+1]
    offsets[1:] = np.cumsum(lengths)
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise ValueError(f"{path}: token ids must lie in [0, {vocab_size})")

    temporary = path + ".tmp"
    with h5py.File(temporary, "w", track_order=False) as f:
        for name, data in (("tokens", tokens), ("loss_mask", loss_mask), ("offsets", offsets)):
            f.create_dataset(name, data=data, chunks=(min(len(data), 4096),), shuffle=True,
                             compression="gzip", compression_opts=4)
        f.attrs["format"] = FORMAT
        f.attrs["version"] = np.int64(VERSION)
        f.attrs["vocab_size"] = np.int64(vocab_size)
        f.attrs["bos_id"] = np.int64(bos_id)
        f.attrs["eos_id"] = np.int64(eos_id)
        f.attrs["pad_id"] = np.int64(pad_id)
        f.attrs["tokenizer_sha256"] = tokenizer_sha256
        f.attrs["max_seq_len"] = np.int64(max_seq_len)
        f.attrs["split"] = split
        f.attrs["source"] = source
    os.replace(temporary, path)


def read_shard(path):
    """Returns (samples, attrs): samples a list of (tokens, loss_mask) numpy arrays, attrs a dict."""
    with h5py.File(path, "r") as f:
        tokens = f["tokens"][...]
        loss_mask = f["loss_mask"][...]
        offsets = f["offsets"][...]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    samples = [(tokens[offsets[i]:offsets[i + 1]], loss_mask[offsets[i]:offsets[i + 1]])
               for i in range(len(offsets) - 1)]
    return samples, attrs


def random_samples(count, vocab_size, min_len, max_len, seed, bos_id=1, eos_id=2):
    """count samples of length in [min_len, max_len]: BOS, random ids in [3, vocab), EOS.
    loss_mask is 0 on the first ceil(L/3) tokens (the "prompt", BOS included) and 1 after."""
    if vocab_size <= 3 or min_len < 2 or max_len < min_len:
        raise ValueError("need vocab_size > 3 and 2 <= min_len <= max_len")
    rng = np.random.RandomState(seed)
    samples = []
    for _ in range(count):
        length = int(rng.randint(min_len, max_len + 1))
        tokens = [bos_id] + rng.randint(3, vocab_size, size=length - 2).tolist() + [eos_id]
        prompt = -(-length // 3)
        loss_mask = [0] * prompt + [1] * (length - prompt)
        samples.append((tokens, loss_mask))
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to write train-00000.h5 into")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--min-len", type=int, required=True)
    parser.add_argument("--max-len", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train")
    parser.add_argument("--max-seq-len", type=int, default=None, help="default: --max-len")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    samples = random_samples(args.samples, args.vocab, args.min_len, args.max_len, args.seed)
    path = os.path.join(args.out, f"{args.split}-00000.h5")
    write_shard(path, samples, args.vocab, max_seq_len=args.max_seq_len or args.max_len, split=args.split,
                source=f"make_token_shard.py --seed {args.seed}")
    print(path)


if __name__ == "__main__":
    main()
