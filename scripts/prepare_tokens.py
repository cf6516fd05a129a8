#!/usr/bin/env python3
"""Turns a text file into token files that `gpipe-plan run` trains on, with a byte-level vocabulary
(token id = the byte's value, 0-255: a model for them has "vocab": 256). Nothing is downloaded.

Writes into OUT_DIR:
  train.bin, val.bin   nanoGPT's layout: uint16 token ids, little-endian, no header
                       (data: {"kind": "tokens-file", "path": "train.bin", "dtype": "uint16",
                               "validation": {"path": "val.bin"}})
  with --megatron also train_text_document.bin/.idx and val_text_document.bin/.idx, Megatron-LM's
  MMap indexed dataset (as its indexed_dataset.py writes it; a document per paragraph)
                       (data: {"kind": "megatron", "path": "train_text_document", ...})

The last --val-fraction of the text (default 0.1) is the validation set.

usage: prepare_tokens.py INPUT.txt OUT_DIR [--val-fraction F] [--megatron]
example: python3 scripts/prepare_tokens.py models/text/public-domain.txt data/
"""
import argparse
import array
import os
import struct
import sys

MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_UINT16 = 8  # indexed_dataset.py's DType code for numpy.uint16


def write_tokens(f, data: bytes):
    """Each byte as its own uint16 id, little-endian, a megabyte at a time."""
    for start in range(0, len(data), 1 << 20):
        tokens = array.array("H", iter(data[start:start + (1 << 20)]))  # ints, not the raw bytes
        if sys.byteorder != "little":
            tokens.byteswap()
        tokens.tofile(f)


def write_flat(path, data: bytes):
    with open(path, "wb") as f:
        write_tokens(f, data)
    return len(data)


def write_megatron(prefix, data: bytes):
    """One document per paragraph (split at blank lines, the separator kept with the paragraph)."""
    documents = [d for d in data.split(b"\n\n")]
    documents = [d + b"\n\n" for d in documents[:-1]] + [documents[-1]]
    documents = [d for d in documents if d]
    lengths = [len(d) for d in documents]
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            write_tokens(f, d)
    pointers, offset = [], 0
    for n in lengths:
        pointers.append(offset)
        offset += n * 2
    with open(prefix + ".idx", "wb") as f:
        f.write(MEGATRON_HEADER)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEGATRON_UINT16))
        f.write(struct.pack("<Q", len(lengths)))      # sequences
        f.write(struct.pack("<Q", len(lengths) + 1))  # document indices: 0, 1, ..., n
        f.write(struct.pack(f"<{len(lengths)}i", *lengths))
        f.write(struct.pack(f"<{len(pointers)}q", *pointers))
        f.write(struct.pack(f"<{len(lengths) + 1}q", *range(len(lengths) + 1)))
    return sum(lengths), len(documents)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("input")
    parser.add_argument("out_dir")
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--megatron", action="store_true", help="also write Megatron-LM's .bin/.idx")
    args = parser.parse_args()
    if not 0 < args.val_fraction < 1:
        sys.exit(f"prepare_tokens.py: --val-fraction {args.val_fraction} is not in (0, 1)")
    try:
        with open(args.input, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.exit(f"prepare_tokens.py: {args.input}: {e.strerror}")
    split = int(len(data) * (1 - args.val_fraction))
    if split < 2 or len(data) - split < 2:
        sys.exit(f"prepare_tokens.py: {args.input}: {len(data)} bytes are too few to split into training and validation")
    os.makedirs(args.out_dir, exist_ok=True)
    for name, part in (("train", data[:split]), ("val", data[split:])):
        n = write_flat(os.path.join(args.out_dir, name + ".bin"), part)
        print(f"{os.path.join(args.out_dir, name + '.bin')}: {n} uint16 tokens")
        if args.megatron:
            prefix = os.path.join(args.out_dir, name + "_text_document")
            tokens, documents = write_megatron(prefix, part)
            print(f"{prefix}.bin/.idx: {tokens} tokens in {documents} documents")


if __name__ == "__main__":
    main()
