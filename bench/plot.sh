#!/usr/bin/env bash
# Turns one lock_contention run (its --json output, one object per line) into PNG plots:
#
#   NAME-acquisitions.png  acquisitions/s on one hot name against the number of waiting
#                          coroutines in all (log2 x, log y): S3 (one process) and S4 (several
#                          processes, one series per process count), with the run's
#                          single-connection limit (redis-benchmark -c 1 -P 1) as a dashed line
#   NAME-calls.png         server calls per acquisition (INFO commandstats, calls inside scripts
#                          included) against the waiters, same series; S4 without the counter's
#                          GET and SET
#   NAME-wait.png          the distribution of the wait (wanting the lock -> holding it) as a CDF,
#                          log x, for S3 and S4 at one number of waiters (--waiters, default 64;
#                          the nearest measured one if that was not)
#
# NAME is the input's file name without its extension; the PNGs go next to it, or to --out DIR.
# The sweep's points ("sweep": true) are used when the run has any, else every S3/S4 line;
# points measured twice at the same count are averaged.
#
# Usage:
#   build/release/bench/lock_contention --scenarios sweep --seconds 1 --json > run.jsonl
#   bench/plot.sh run.jsonl [--out DIR] [--waiters 64]
#
# Needs python3 (standard library only) and gnuplot; installs gnuplot-nox with apt-get when
# gnuplot is missing (as root, or with sudo).
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

input=""
out=""
waiters=64
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --waiters) waiters="${2:?--waiters needs a number}"; shift 2 ;;
    --waiters=*) waiters="${1#--waiters=}"; shift ;;
    -h | --help) usage 0 ;;
    -*) echo "plot.sh: unknown option $1" >&2; usage 2 >&2 ;;
    *)
        [ -z "$input" ] || { echo "plot.sh: one input file only" >&2; exit 2; }
        input="$1"; shift ;;
    esac
done
[ -n "$input" ] || { echo "plot.sh: no input file (try --help)" >&2; exit 2; }
[ -r "$input" ] || { echo "plot.sh: cannot read $input" >&2; exit 2; }
case "$waiters" in '' | *[!0-9]*) echo "plot.sh: --waiters wants a whole number" >&2; exit 2 ;; esac
[ -n "$out" ] || out="$(dirname -- "$input")"
mkdir -p -- "$out"
name="$(basename -- "$input")"
name="${name%.*}"

if ! command -v gnuplot >/dev/null 2>&1; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "plot.sh: gnuplot is missing and installing it needs root (apt-get install" \
                "gnuplot-nox)" >&2
            exit 1
        fi
    fi
    echo "plot.sh: installing gnuplot-nox" >&2
    apt_opts=(-o DPkg::Lock::Timeout=300)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -q \
        --no-install-recommends gnuplot-nox >&2
fi

terminal="pngcairo size 900,600 font 'sans,10'"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || terminal="png size 900,600"

# python3 reads the run and writes the whole gnuplot script, data blocks included.
script="$(python3 - "$input" "$out/$name" "$waiters" "$terminal" <<'PY'
import json
import sys
from collections import defaultdict

path, prefix, wanted, terminal = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

lines = []
with open(path) as f:
    for number, text in enumerate(f, 1):
        text = text.strip()
        if not text.startswith("{"):
            continue  # a text-mode line, or something else that is not ours
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError as e:
            sys.exit(f"plot.sh: {path}:{number}: not JSON: {e}")

# The single server's, with cohorts on: --redlock adds the same shapes over primaries and S3
# with cohorts off, which the side-by-side table already compares.
hot = [l for l in lines if l.get("scenario") in ("S3", "S4") and "waiters" in l
       and l.get("deployment", "single") == "single" and l.get("cohort_limit") != 0]
if not hot:
    sys.exit(f"plot.sh: {path} has no S3 or S4 line (run lock_contention --json with "
             "--scenarios sweep, or S3,S4)")
if any(l.get("sweep") for l in hot):
    hot = [l for l in hot if l.get("sweep")]
limit = next((l for l in lines if l.get("scenario") == "limit"), None)
ping = next((l for l in lines if l.get("scenario") == "ping"), None)
modes = sorted({l.get("mode", "?") for l in hot})


def label(l):
    if l["scenario"] == "S3":
        return "S3: 1 process"
    return f"S4: {l['processes']} processes (GET+SET counter in the section)"


series = defaultdict(lambda: defaultdict(list))  # label -> waiters -> lines
for l in hot:
    series[label(l)][l["waiters"]].append(l)
order = sorted(series, key=lambda s: (not s.startswith("S3"), s))


def mean(values):
    return sum(values) / len(values)


def block(name, rows):
    return f"${name} << EOD\n" + "".join(" ".join(f"{v:g}" for v in r) + "\n" for r in rows) + "EOD\n"


def quote(s):
    return "'" + s.replace("'", "''") + "'"


out = [f"set terminal {terminal}", "set grid", "set key outside below",
       "set style data linespoints", "set logscale x 2"]
subtitle = f"mode {', '.join(modes)}"
if ping:
    subtitle += f"; PING p50 {ping['p50_us']:.0f} us"

# Acquisitions/s, and calls per acquisition, against the waiters.
acq_plots, call_plots = [], []
for i, s in enumerate(order):
    points = sorted(series[s].items())
    out.append(block(f"acq{i}", [(w, mean([l["acquisitions_per_s"] for l in ls])) for w, ls in points]))
    out.append(block(f"calls{i}", [(w, mean([l["lock_calls_per_acq"] for l in ls])) for w, ls in points]))
    acq_plots.append(f"$acq{i} using 1:2 title {quote(s)} lw 2 pt 7")
    call_plots.append(f"$calls{i} using 1:2 title {quote(s)} lw 2 pt 7")
if limit:
    single = limit["single"]["cycles_per_s"]
    acq_plots.append(f"{single:g} with lines dt 2 lc rgb 'gray40' lw 2 "
                     f"title 'limit: SET NX PX + EVALSHA, redis-benchmark -c 1 -P 1'")
waiter_values = sorted({w for s in series.values() for w in s})
xrange = f"set xrange [{waiter_values[0] / 1.3:g}:{waiter_values[-1] * 1.3:g}]"
out += [f"set output {quote(prefix + '-acquisitions.png')}",
        f"set title {quote('colock: acquisitions/s on one hot name (' + subtitle + ')')}",
        "set xlabel 'waiting coroutines in all'", "set ylabel 'acquisitions/s'",
        xrange, "set logscale y 10", "set yrange [*:*]", "set format y '%.0s%c'",
        "plot " + ", \\\n     ".join(acq_plots), "unset output", "unset logscale y"]
out += [f"set output {quote(prefix + '-calls.png')}",
        f"set title {quote('colock: server calls per acquisition, counter GET/SET left out (' + subtitle + ')')}",
        "set xlabel 'waiting coroutines in all'", "set ylabel 'calls per acquisition (INFO commandstats)'",
        xrange, "set yrange [0:*]", "set format y '%g'",
        "plot " + ", \\\n     ".join(call_plots), "unset output"]

# The wait's CDF at the chosen number of waiters (or the nearest measured one, per series).
wait_plots = []
for i, s in enumerate(order):
    at = min(series[s], key=lambda w: (abs(w - wanted), w))
    chosen = series[s][at][-1]
    if chosen.get("wait_us_samples"):
        samples = sorted(chosen["wait_us_samples"])
        n = len(samples)
        rows = [(max(v, 0.1), (k + 1) / n) for k, v in enumerate(samples)]
    else:
        hist = chosen.get("wait_hist_us") or []
        n = sum(c for _, c in hist)
        rows, seen = [], 0
        for edge, count in hist:
            seen += count
            rows.append((edge, seen / n))
    if not rows:
        continue
    out.append(block(f"wait{i}", rows))
    title = (f"{s.split(' (')[0]}, {at} waiters: p50 {chosen['wait_p50_us']:.0f} us, "
             f"p99 {chosen['wait_p99_us']:.0f} us, p99.9 {chosen['wait_p999_us']:.0f} us")
    wait_plots.append(f"$wait{i} using 1:2 with steps title {quote(title)} lw 2")
out += [f"set output {quote(prefix + '-wait.png')}",
        f"set title {quote(f'colock: wait to acquire, CDF ({subtitle})')}",
        "unset logscale x", "set logscale x 10", "set xrange [*:*]", "set yrange [0:1.02]",
        "set format x '%g'", "set format y '%.1f'",
        "set xlabel 'wait from wanting the lock to holding it (us)'",
        "set ylabel 'fraction of acquisitions'",
        "plot " + ", \\\n     ".join(wait_plots), "unset output"]

print("\n".join(out))
PY
)"
printf '%s\n' "$script" | gnuplot
for plot in acquisitions calls wait; do
    echo "$out/$name-$plot.png"
done
