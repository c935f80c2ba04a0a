"""Import the original ELLM answer cache into ours: ``python -m ellm.lm.import_cache FILE.pkl``,
the pickle read as data, never unpickled (that would run its author's code)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmclient.cache import AnswerCache, CachedAnswer, CacheError, make_key, sampling_params
from lmclient.spec import OPENAI_API_URL, default_cache_dir
from text_game.pickled import PickleDataError, loads


def load_original(path: Path) -> dict[Any, Any]:
    """The original cache dict, read without running foreign code."""
    try:
        data = loads(path.read_bytes())
    except (OSError, PickleDataError) as err:
        raise ValueError(f"cannot read the original ELLM cache {path}: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 - a bad file is a bad value
            f"{path} holds a {type(data).__name__}, expected a dict")
    return data


def convert(data: dict[Any, Any], source: str
            ) -> tuple[list[tuple[str, str, str, Any, dict[str, Any], CachedAnswer, str]], int]:
    """Rows for ``AnswerCache.put_many`` and the number of unreadable entries skipped."""
    rows, skipped = [], 0
    for key, text in data.items():
        if not (isinstance(key, tuple) and len(key) == 5 and isinstance(text, str)):
            skipped += 1
            continue
        engine, prompt, max_tokens, temperature, stop = key
        try:  # OverflowError: an int past float's range; ValueError: one too long to print
            params = sampling_params(max_tokens=max_tokens, temperature=temperature, stop=stop)
            cache_key = make_key("completions", str(engine), prompt, params,
                                 scope=OPENAI_API_URL)
        except (TypeError, ValueError, OverflowError):
            skipped += 1
            continue
        status = "ok" if text.strip() else "malformed"
        answer = CachedAnswer(status, text, source=source)
        rows.append((cache_key, "completions", str(engine), prompt, params, answer,
                     OPENAI_API_URL))
    return rows, skipped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ellm.lm.import_cache",
        description="Import the original ELLM pickle cache {(engine, prompt, max_tokens, "
                    "temperature, stop): text} into the ellm LM cache.")
    parser.add_argument("pickle", type=Path, help="the original cache file (.pkl)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="target cache directory (default: $ELLM_CACHE_DIR or ~/.cache/ellm)")
    parser.add_argument("--show", type=int, default=0, metavar="N",
                        help="also print N imported prompts (to write a prompt_file template)")
    args = parser.parse_args(argv)
    try:
        data = load_original(args.pickle)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows, skipped = convert(data, f"import:{args.pickle.name}")
    cache = AnswerCache(args.cache_dir or default_cache_dir())
    try:
        new = cache.put_many(rows)
    except CacheError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    engines = sorted({row[2] for row in rows})
    print(f"imported {new} new entries ({len(rows) - new} already present, {skipped} skipped) "
          f"from {args.pickle} into {cache.path}; models: {', '.join(engines) or '-'}")
    for row in rows[:args.show]:
        print("-" * 20, f"\n{row[3]}")
    cache.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
