"""Checks the layer libraries' symbols against the tl_layer table of CMakeLists.txt.

Run by ctest (CMakeLists.txt adds it next to torchlite_tests):
    python check_layer_links.py CMakeLists.txt BUILD_DIR

NOTE: the linker alone catches a call that reaches back up the pipeline only when
nothing else pulled in the object defining it; here every undefined symbol of
tl_X.a that another layer defines must come from a layer X may depend on, so a
wrong call fails every time, naming the caller's object and the symbol.
"""

import re
import subprocess
import sys
from pathlib import Path

# Strong definitions; weak (W, V), unique (u) and common symbols may be defined in
# several layers (inline functions, templates, vtables) and say nothing about direction.
STRONG = set("TDBR")


def layer_table(cmakelists: Path) -> dict[str, set[str]]:
    """Layer -> the layers it may use (its tl_layer dependencies, transitively)."""
    direct = {
        m.group(1): set(m.group(2).split())
        for m in re.finditer(
            r"^tl_layer\((\w+)((?:\s+\w+)*)\)", cmakelists.read_text(), re.MULTILINE
        )
    }
    allowed = {}
    for layer, deps in direct.items():
        seen, todo = set(), list(deps)
        while todo:
            dep = todo.pop()
            if dep not in seen:
                seen.add(dep)
                todo.extend(direct.get(dep, ()))
        allowed[layer] = seen
    return allowed


def symbols(archive: Path):
    """(object, type, name) for every symbol of a static library."""
    out = subprocess.run(
        ["nm", "-A", str(archive)], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        # "lib.a:obj.o:0000000000000000 T name" or "lib.a:obj.o:                 U name"
        head, _, rest = line.rpartition(":")
        parts = rest.split()
        if len(parts) >= 2:
            yield head.split(":")[-1], parts[-2], parts[-1]


def main() -> int:
    cmakelists, build = Path(sys.argv[1]), Path(sys.argv[2])
    allowed = layer_table(cmakelists)
    defined_in: dict[str, str] = {}
    undefined: list[tuple[str, str, str]] = []
    for layer in allowed:
        archive = build / f"libtl_{layer}.a"
        if not archive.exists():
            print(f"check_layer_links: {archive} is missing (build torchlite_tests first)")
            return 1
        for obj, kind, name in symbols(archive):
            if kind == "U":
                undefined.append((layer, obj, name))
            elif kind in STRONG:
                defined_in.setdefault(name, layer)
    bad = sorted(
        (layer, obj, name)
        for layer, obj, name in undefined
        if name in defined_in
        and defined_in[name] != layer
        and defined_in[name] not in allowed[layer]
    )
    readable = subprocess.run(
        ["c++filt"],
        check=True,
        input="\n".join(n for _, _, n in bad),
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    wrong = [
        f"{layer}/{obj} uses {shown} of layer {defined_in[name]}"
        for (layer, obj, name), shown in zip(bad, readable, strict=False)
    ]
    if wrong:
        print(
            "calls that reach back up the pipeline (CMakeLists.txt tl_layer, docs/internals/layering.md):"
        )
        print("\n".join(wrong[:50]))
        return 1
    print(
        f"check_layer_links: {len(allowed)} layers, {len(undefined)} undefined references, all point down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
