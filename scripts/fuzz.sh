#!/usr/bin/env bash
# Fuzzes the config loader, the YAML tree and keadmCmd rendering (gotmpl with our additions),
# each for a bounded time (default 300 s per target). Not run in CI: libFuzzer needs a sanitizer flag
# that only nightly accepts, so RUSTC_BOOTSTRAP=1 lets the one stable toolchain take it.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a C++ compiler. A crash leaves its
# input under fuzz/artifacts/<target>/; turn it into a regression fixture under
# tests/fixtures/fuzz/<target>/ (tests/fuzz_regressions.rs runs every file there).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(yaml_parse config_load template_render)

export RUSTC_BOOTSTRAP=1

# Seed each corpus with the configs and templates the tests already know.
seed() {
    local target=$1 dir=fuzz/corpus/$1
    mkdir -p "$dir"
    case $target in
        yaml_parse | config_load)
            cp -n tests/fixtures/valid/*.yaml tests/fixtures/invalid/*.yaml batch_config.example.yaml "$dir"/ 2>/dev/null || true
            ;;
        template_render)
            printf '%s' 'join --cloudcore-ipport={{.cloudcore-ipport}} --edgenode-name={{ .name }}' >"$dir/seed-dot"
            printf '%s' 'join {{- index . "cloudcore-ipport" -}} --token={{env "TOKEN"}} {{/* c */}}' >"$dir/seed-index"
            printf '%s' 'reset {{name}} ${HOME} awk '"'"'{print}'"'"' {{if .x}}' >"$dir/seed-ext"
            printf '%s' '{{range $k, $v := .}}{{if eq $k "v"}}{{$v | printf "%q"}}{{else}}{{len $v}}{{end}}{{end}}{{with index . "empty"}}x{{end}}' >"$dir/seed-go"
            printf '%s' '{{define "t"}}{{.}}{{end}}{{template "t" (env (env "NEXT"))}} {{and .v (not .empty) | print}}' >"$dir/seed-env"
            ;;
    esac
    if [ -d "tests/fixtures/fuzz/$target" ]; then
        cp -n "tests/fixtures/fuzz/$target"/* "$dir"/ 2>/dev/null || true
    fi
}

status=0
for target in "${targets[@]}"; do
    seed "$target"
    echo "== $target: ${seconds}s"
    log=fuzz/$target.log
    if cargo fuzz run --fuzz-dir fuzz "$target" -- \
        -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 2>"$log"; then
        grep -E '^(stat::number_of_executed_units|Done [0-9]+ runs)' "$log" || true
    else
        status=1
        echo "== $target: crashed; input under fuzz/artifacts/$target/, log in $log" >&2
        tail -n 40 "$log" >&2
    fi
done
exit "$status"
