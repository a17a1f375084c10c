"""The on-disk kernel cache: `python -m torchlite.cache {info,clear} [--dir DIR]`.

The cache lives in torchlite.config.cache_dir (TORCHLITE_CACHE_DIR, default
~/.cache/torchlite); its rules (who may write it, how entries are authenticated)
are in docs/security.md.
"""

import sys

from torchlite import _C, settings


def info(cache_dir: str | None = None) -> dict:
    """Folder, entries (CPU objects, CUDA images), bytes, size cap and, when the
    folder is not used, why."""
    settings.apply_process_settings()
    return dict(_C.disk_cache_info(cache_dir))


def clear(cache_dir: str | None = None) -> int:
    """Removes every entry (the next compiles start cold); returns the number of files removed."""
    settings.apply_process_settings()
    removed = _C.disk_cache_clear(cache_dir)
    if removed < 0:
        where = cache_dir or info()["dir"]
        raise PermissionError(
            f"torchlite: not clearing {where}: {info(where)['problem'] or 'not a trusted folder'}"
        )
    return removed


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    import argparse  # NOTE: here, not at the top: `import torchlite` stays cheap

    parser = argparse.ArgumentParser(prog="python -m torchlite.cache", description=__doc__)
    parser.add_argument("command", choices=["info", "clear"])
    parser.add_argument("--dir", default=None, help="cache folder (default: the cache_dir setting)")
    args = parser.parse_args(argv)
    if args.command == "clear":
        try:
            n = clear(args.dir)
        except PermissionError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"removed {n} file(s) from {args.dir or info()['dir']}")
        return 0
    i = info(args.dir)
    print(f"cache folder: {i['dir'] or '(off)'}")
    if i["problem"]:
        print(f"not used: {i['problem']}")
        return 1
    cap = _mb(i["max_bytes"]) if i["max_bytes"] else "none"
    print(f"entries: {i['cpu_entries']} CPU objects, {i['cuda_entries']} CUDA images")
    print(f"size: {_mb(i['bytes'])} (cap {cap})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
