#!/usr/bin/env bash
# Builds the QuickJS WebAssembly module the daemon embeds (src/serve/isolate/wasm/vendor/quickjs.wasm)
# from source: quickjs-ng at QUICKJS_NG_COMMIT (its files checked against sources.sha256), the
# patches in patches/ applied in name order, and interface.c; compiled by Debian 12's clang 16 for
# wasm32-wasi against Debian's wasi-libc. See README.md.
#
#   vendor/quickjs-wasm/build.sh          build, and write the module over the committed one
#   vendor/quickjs-wasm/build.sh --check  build, and fail unless the committed module is the same
#
# The sources are the files of that commit the build needs, vendored in quickjs-ng/ (so the build
# needs no network); QUICKJS_NG_SOURCE=<directory> uses another copy of the same commit instead
# (checked all the same). The build is reproducible: the same sources
# and toolchain give the same bytes, which is what --check relies on, so a toolchain package at
# another version is refused rather than used.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
output=$root/src/serve/isolate/wasm/vendor/quickjs.wasm

QUICKJS_NG_COMMIT=05b2db95d9b8a088a203950727d1c3459fe0ec47

# Debian 12 (bookworm) packages, at the versions the committed module was built with.
TOOLCHAIN=(
    "clang-16 1:16.0.6-15~deb12u1"
    "lld-16 1:16.0.6-15~deb12u1"
    "libclang-rt-16-dev-wasm32 1:16.0.6-15~deb12u1"
    "wasi-libc 0.0~git20220510.9886d3d-2"
)

check=0
case "${1:-}" in
    "") ;;
    --check) check=1 ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

for entry in "${TOOLCHAIN[@]}"; do
    package=${entry%% *} wanted=${entry#* }
    installed=$(dpkg-query -W -f '${Version}' "$package" 2>/dev/null || true)
    if [[ $installed != "$wanted" ]]; then
        echo "error: $package $wanted is needed (installed: ${installed:-none});" \
            "on Debian 12: apt-get install clang-16 lld-16 libclang-rt-16-dev-wasm32 wasi-libc" >&2
        exit 1
    fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Sources are compiled by relative paths from $work: assertion messages embed them, and the
# bytes must not depend on where the build ran.
mkdir "$work/quickjs-ng"
cp -R "${QUICKJS_NG_SOURCE:-$here/quickjs-ng}/." "$work/quickjs-ng/"
(cd "$work/quickjs-ng" && sha256sum --check --quiet "$here/sources.sha256") \
    || { echo "error: the quickjs-ng sources are not those of $QUICKJS_NG_COMMIT (sources.sha256)" >&2; exit 1; }
for patch in "$here"/patches/*.patch; do
    [[ -e $patch ]] || continue
    patch --quiet --directory="$work/quickjs-ng" --strip=1 --input="$patch"
done
cp "$here/interface.c" "$work/interface.c"

cflags=(
    --target=wasm32-wasi -O2 -flto
    -Iquickjs-ng
    -D_GNU_SOURCE -D_WASI_EMULATED_PROCESS_CLOCKS -D_WASI_EMULATED_SIGNAL -DQJS_BUILD_LIBC=0
    # quickjs.h exports its API (JS_*) only when building a shared library; the daemon calls it.
    -DBUILDING_QJS_SHARED -fvisibility=hidden
    -Wall -Wno-implicit-fallthrough -Wno-sign-compare -Wno-missing-field-initializers
    -Wno-unused-parameter -Wno-unused-but-set-variable -Wno-unused-function
)
ldflags=(
    --target=wasm32-wasi -flto -mexec-model=reactor
    -lwasi-emulated-process-clocks -lwasi-emulated-signal
    -Wl,--export-dynamic -Wl,--export=__stack_pointer
    # The shadow stack (1 MiB) first, at the bottom of memory: a call that overflows it traps
    # instead of writing over data (the daemon checks this when it builds its image).
    -Wl,--stack-first -Wl,-z,stack-size=1048576
    -Wl,--strip-all
)
(
    cd "$work"
    for source in quickjs-ng/quickjs.c quickjs-ng/dtoa.c quickjs-ng/libregexp.c quickjs-ng/libunicode.c interface.c; do
        object=$(basename "$source" .c).o
        clang-16 "${cflags[@]}" -c -o "$object" "$source"
    done
    clang-16 "${ldflags[@]}" -o quickjs.wasm quickjs.o dtoa.o libregexp.o libunicode.o interface.o
)

if ((check)); then
    if ! cmp --silent "$work/quickjs.wasm" "$output"; then
        echo "error: ${output#"$root"/} is not what vendor/quickjs-wasm/build.sh builds;" \
            "run vendor/quickjs-wasm/build.sh and commit the result" >&2
        exit 1
    fi
    echo "${output#"$root"/} is what vendor/quickjs-wasm/build.sh builds (quickjs-ng ${QUICKJS_NG_COMMIT:0:12})"
else
    cp "$work/quickjs.wasm" "$output"
    echo "built ${output#"$root"/} ($(stat -c %s "$output") bytes, sha256 $(sha256sum "$output" | cut -c1-16)…)"
fi
