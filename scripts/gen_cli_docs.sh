#!/usr/bin/env bash
# Writes docs/CLI.md, the full command-line reference, from the programs' own help: `slimfit help`,
# then `slimfit <command> --help` for every command it lists, every variant a help text points to
# (`see 'slimfit plan --all --help'`) and every sub-command its usage lines name (`slimfit workers
# revoke ID ...`), then `slimfit-coordinator --help` and `slimfit-worker --help`. Nothing in the page
# is written by hand, so it cannot drift from the code; help texts must therefore print no
# machine-dependent values (paths, dates, core counts — a flag whose default depends on the machine
# says so in words and registers no default).
#
# Usage: scripts/gen_cli_docs.sh [--check] [--no_build]
#   (default)   builds //client:slimfit, //server:slimfit-coordinator and //worker:slimfit-worker
#               and writes docs/CLI.md.
#   --check     writes nothing; exits 1 with "docs/CLI.md is stale: run scripts/gen_cli_docs.sh"
#               when the page differs from what the programs print now.
#   --no_build  takes the binaries already under bazel-bin/ (what `bazel test //...` built) instead
#               of building them; scripts/test.sh runs `--check --no_build` after its tests.
# Works from any directory.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

check=0
build=1
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --no_build) build=0 ;;
    *) echo "usage: scripts/gen_cli_docs.sh [--check] [--no_build]" >&2; exit 2 ;;
  esac
done

targets=(//client:slimfit //server:slimfit-coordinator //worker:slimfit-worker)
binaries=(client/slimfit server/slimfit-coordinator worker/slimfit-worker)
if [ "$build" -eq 1 ]; then
  bazel build --color=no --curses=no "${targets[@]}" >&2
fi
for binary in "${binaries[@]}"; do
  if [ ! -x "bazel-bin/$binary" ]; then
    echo "gen_cli_docs: bazel-bin/$binary is missing: build ${targets[*]} first (or run without --no_build)" >&2
    exit 1
  fi
done

# The programs run with an empty environment, so nothing from this shell ($SLIMFIT_*, locale) can
# reach the text.
run() {
  env -i PATH=/usr/bin:/bin LC_ALL=C.UTF-8 "$@"
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/gen_cli_docs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# help_of INVOCATION...: the help text a program prints for `INVOCATION --help`; fails the script
# when the program fails.
help_of() {
  local out
  if ! out="$(run "$@" --help 2>"$tmp/stderr")"; then
    echo "gen_cli_docs: '${*#bazel-bin/*/} --help' failed:" >&2
    sed 's/^/    /' "$tmp/stderr" >&2
    exit 1
  fi
  printf '%s\n' "$out"
}

slimfit="bazel-bin/client/slimfit"
general="$(run "$slimfit" help)"

# The commands `slimfit help` lists: lines "  NAME   summary" after "commands:", "help" aside.
mapfile -t commands < <(printf '%s\n' "$general" |
  sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9_-]*\)  .*/\1/p' | grep -vx help)
if [ "${#commands[@]}" -eq 0 ]; then
  echo "gen_cli_docs: 'slimfit help' listed no commands" >&2
  exit 1
fi

# Breadth-first over invocations ("plan", "plan --all", "workers revoke"), each help text adding the
# variants it names; a variant whose help repeats one already shown (`certs init` prints `certs`'s
# help) is left out.
queue=("${commands[@]}")
declare -A seen_invocation=()
declare -A seen_text=()
sections=()
i=0
while [ "$i" -lt "${#queue[@]}" ]; do
  invocation="${queue[$i]}"
  i=$((i + 1))
  [ -n "${seen_invocation[$invocation]:-}" ] && continue
  seen_invocation[$invocation]=1
  read -r -a words <<<"$invocation"
  text="$(help_of "$slimfit" "${words[@]}")"
  digest="$(printf '%s' "$text" | sha256sum | cut -d' ' -f1)"
  [ -n "${seen_text[$digest]:-}" ] && continue
  seen_text[$digest]=1
  n="${#sections[@]}"
  printf '%s\n' "$text" >"$tmp/section.$n"
  sections+=("slimfit $invocation")
  # Variants: quoted pointers "'slimfit WORDS --help'" whose words are literal (no upper-case
  # argument names such as JOB), and usage lines "slimfit COMMAND SUB ..." whose leading
  # lower-case words go beyond the command.
  mapfile -t variants < <(
    {
      printf '%s\n' "$text" | grep -o "'slimfit [^']* --help'" |
        sed "s/^'slimfit //; s/ --help'\$//" | grep -E '^[a-z0-9_=. -]+$' || true
      printf '%s\n' "$text" | sed -n 's/^\(usage: \|       \)slimfit \(.*\)/\2/p' |
        awk '{ line = ""; for (w = 1; w <= NF && $w ~ /^[a-z][a-z0-9_]*$/; ++w) line = line (w > 1 ? " " : "") $w;
               if (w > 2) print line }' || true
    })
  for variant in "${variants[@]}"; do
    [ -n "$variant" ] && queue+=("$variant")
  done
done

# The page's order: the commands as `slimfit help` lists them, each followed by its variants.
ordered=()
for command in "${commands[@]}"; do
  for n in "${!sections[@]}"; do
    read -r -a words <<<"${sections[$n]}"
    [ "${words[1]}" = "$command" ] && ordered+=("$n")
  done
done

if [ "${#ordered[@]}" -ne "${#sections[@]}" ]; then
  echo "gen_cli_docs: a help variant belongs to no command 'slimfit help' lists" >&2
  exit 1
fi

anchor() {
  printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}

daemons=("slimfit-coordinator:server/slimfit-coordinator" "slimfit-worker:worker/slimfit-worker")
page="$tmp/CLI.md"
{
  echo "# Command-line reference"
  echo
  echo "<!-- Generated by scripts/gen_cli_docs.sh from the programs' own help; do not edit. -->"
  echo
  echo "Every command of the \`slimfit\` client and every flag of the two daemons, exactly as they"
  echo "print it with \`--help\`. Regenerate this page with \`scripts/gen_cli_docs.sh\` after changing"
  echo "a help text; \`scripts/test.sh\` fails while it is stale. Conventions (flag syntax, byte sizes,"
  echo "exit statuses) are in the README's \"CLI reference\"."
  echo
  echo "- [\`slimfit\`](#slimfit)"
  for n in "${ordered[@]}"; do
    echo "- [\`${sections[$n]}\`](#$(anchor "${sections[$n]}"))"
  done
  for daemon in "${daemons[@]}"; do
    echo "- [\`${daemon%%:*}\`](#$(anchor "${daemon%%:*}"))"
  done
  echo
  echo "## slimfit"
  echo
  echo '```text'
  printf '%s\n' "$general"
  echo '```'
  for n in "${ordered[@]}"; do
    echo
    echo "## ${sections[$n]}"
    echo
    echo '```text'
    cat "$tmp/section.$n"
    echo '```'
  done
  for daemon in "${daemons[@]}"; do
    echo
    echo "## ${daemon%%:*}"
    echo
    echo '```text'
    help_of "bazel-bin/${daemon#*:}"
    echo '```'
  done
} >"$page"

if [ "$check" -eq 1 ]; then
  if ! cmp -s "$page" docs/CLI.md; then
    echo "docs/CLI.md is stale: run scripts/gen_cli_docs.sh" >&2
    exit 1
  fi
  echo "gen_cli_docs: docs/CLI.md is current"
  exit 0
fi
cp "$page" docs/CLI.md
echo "gen_cli_docs: wrote docs/CLI.md (${#sections[@]} command help texts and 2 daemons)"
