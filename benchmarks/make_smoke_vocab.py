"""How the smoke tokenizer's vocabulary (``hp_mlm/corpora/smoke_vocab.txt``) was made, kept to remake it.

``python benchmarks/make_smoke_vocab.py`` prints how the retrained vocabulary differs from the shipped
one (the trainer breaks ties between equally frequent pieces differently from run to run, which is
why the course ships the file); ``--write`` replaces the shipped file.
"""

from __future__ import annotations

import argparse
from importlib import resources

from hp_mlm.common import atomic_write_text
from hp_mlm.models import SMOKE_VOCAB_SIZE, smoke_vocab_path
from hp_mlm.profiles import PACKAGE_DATASETS, SMOKE_DATASET


def train_smoke_vocab(vocab_size: int = SMOKE_VOCAB_SIZE) -> list[str]:
    """Train a lower-casing WordPiece vocabulary on the smoke corpus with ``tokenizers``.

    This is how ``hp_mlm/corpora/smoke_vocab.txt`` was made. The trainer breaks ties between equally
    frequent pieces differently from run to run, so the course ships the result rather than
    retraining it on every run (same vocabulary, same token ids, same results everywhere).

    Returns:
        The vocabulary, one token per entry, in id order (special tokens first).
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=specials, min_frequency=2, show_progress=False
    )
    lines = (
        (resources.files("hp_mlm") / "corpora" / PACKAGE_DATASETS[SMOKE_DATASET])
        .read_text(encoding="utf-8")
        .splitlines()
    )
    tok.train_from_iterator([line for line in lines if line.strip()], trainer=trainer)
    vocab = tok.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the shipped vocabulary")
    args = parser.parse_args()
    vocab = train_smoke_vocab()
    shipped = smoke_vocab_path().read_text(encoding="utf-8").splitlines()
    print(f"retrained: {len(vocab)} tokens; shipped: {len(shipped)}; in both: {len(set(vocab) & set(shipped))}")
    if args.write:
        atomic_write_text(str(smoke_vocab_path()), "\n".join(vocab) + "\n")


if __name__ == "__main__":
    main()
