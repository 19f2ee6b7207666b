#!/usr/bin/env bash
# collectors.sh: one run of `cbdash loadgen` against one or two `cbdash serve`
# processes, with what loadgen cannot see from outside one server: each
# collector's CPU per acknowledged window report, PostgreSQL's CPU per
# report, and how often a collector's backend waited on a lock held by the
# other collector's (pg_locks / pg_blocking_pids, sampled every 100 ms).
#
#   bench/collectors.sh BINARY MODE [INSTANCES] [BREAKERS] [SECONDS]
#
# MODE: sqlite (one collector, a fresh SQLite file), pg1 (one collector on
# PostgreSQL), pg2 (two collectors on one PostgreSQL schema, the agents
# split between them), pg2pinned (the same, each collector pinned to one
# core with taskset), pg1pinned (one collector pinned to core 0).
# PPROF=S writes a CPU profile of each collector, S seconds from 10 s into
# the run, to $PPROF_OUT/collectorN.pprof (default /tmp); pprof on ports
# 18801-18802. LOCKDETAIL=1 also prints which statements waited on which (the waiting
# one, the blocker's state and last statement), most sampled first.
# PostgreSQL: $CBDASH_TEST_POSTGRES (a fresh schema per run, dropped at the
# end). Prints loadgen's summary, then one line per collector and one for
# PostgreSQL. Ports 18701-18702. Needs psql and, for pinned modes, taskset.
set -euo pipefail
BIN=${1:?usage: collectors.sh BINARY MODE [INSTANCES] [BREAKERS] [SECONDS]}
MODE=${2:?mode: sqlite, pg1, pg2, pg1pinned or pg2pinned}
N=${3:-1000}
B=${4:-20}
SECS=${5:-30}
export GOTOOLCHAIN=go1.27.3
PW=collectors-bench-password
DIR=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${SCHEMA:-}" ]; then psql -q "$PGURL" -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true; fi
	rm -rf "$DIR"
}
trap cleanup EXIT

case $MODE in
sqlite) DB=$DIR/cb.db; NSERVE=1 ;;
pg1 | pg1pinned) NSERVE=1 ;;
pg2 | pg2pinned) NSERVE=2 ;;
*) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
if [ "$MODE" != sqlite ]; then
	PGURL=${CBDASH_TEST_POSTGRES:?set CBDASH_TEST_POSTGRES to a PostgreSQL URL}
	SCHEMA=bench_$$
	psql -q "$PGURL" -c "CREATE SCHEMA $SCHEMA" >/dev/null
	sep='?'; case $PGURL in *\?*) sep='&' ;; esac
	DB="$PGURL${sep}search_path=$SCHEMA"
fi

URLS=()
for i in $(seq 1 "$NSERVE"); do
	port=$((18700 + i))
	db=$DB
	if [ "$MODE" != sqlite ]; then db="$DB&application_name=cbdash_bench_$i"; fi
	pin=()
	case $MODE in *pinned) pin=(taskset -c $((i - 1))) ;; esac
	prof=()
	if [ -n "${PPROF:-}" ]; then prof=(--pprof 127.0.0.1:$((18800 + i))); fi
	"${pin[@]}" "$BIN" serve --addr 127.0.0.1:$port --db "$db" --log-level warn --max-connections-per-address 100000 "${prof[@]}" >"$DIR/serve$i.log" 2>&1 &
	PIDS+=($!)
	URLS+=(http://127.0.0.1:$port)
	# One at a time: the first one's migrations are done when it is ready.
	ready=
	for _ in $(seq 1 300); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && ready=1 && break; sleep 0.1; done
	if [ -z "$ready" ]; then echo "collector $i did not get ready:" >&2; cat "$DIR/serve$i.log" >&2; exit 1; fi
done

pgcpu() { # the CPU of every PostgreSQL process of this machine, in clock ticks
	local t=0
	for p in $(pgrep -x postgres || true); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
	echo $t
}

sampler() { # one line per sample: the number of our backends waiting on the other collector's
	while :; do
		if [ -n "${LOCKDETAIL:-}" ]; then # which statement waits on which (the blocker's last statement)
			psql -qAt -F ' | ' "$PGURL" -c "SELECT a.application_name, left(regexp_replace(a.query, '\s+', ' ', 'g'), 90), b.application_name, b.state, left(regexp_replace(b.query, '\s+', ' ', 'g'), 90)
				FROM pg_stat_activity a, unnest(pg_blocking_pids(a.pid)) AS bp(pid) JOIN pg_stat_activity b ON b.pid = bp.pid
				WHERE a.application_name LIKE 'cbdash_bench_%' AND b.application_name LIKE 'cbdash_bench_%'
				AND split_part(a.application_name, ' ', 1) <> split_part(b.application_name, ' ', 1)" >>"$DIR/lockdetail" 2>/dev/null || true
		fi
		psql -qAt "$PGURL" -c "SELECT count(*) FROM pg_stat_activity a, unnest(pg_blocking_pids(a.pid)) AS bp(pid)
			JOIN pg_stat_activity b ON b.pid = bp.pid
			WHERE a.application_name LIKE 'cbdash_bench_%' AND b.application_name LIKE 'cbdash_bench_%'
			AND split_part(a.application_name, ' ', 1) <> split_part(b.application_name, ' ', 1)" 2>/dev/null | sed "s/^/$(date +%s.%N) /" || echo err
		sleep 0.1
	done
}

"$BIN" user add benchadmin --role admin --password "$PW" --db "$DB" >/dev/null
AT=$("$BIN" token create --db "$DB" --service '*')
UT=$("$BIN" token create --db "$DB" --user benchadmin)

txs() { # each collector's store transactions and operations committed so far, "t o" a line
	for u in "${URLS[@]}"; do
		curl -fs -H "Authorization: Bearer $UT" "$u/metrics" 2>/dev/null |
			awk '/^cbdash_store_transactions_total/ {t=$2} /^cbdash_store_operations_total/ {o=$2} END {print t+0, o+0}'
	done
}

pgbefore=$(pgcpu)
txbefore=$(txs)
t0=$(date +%s.%N)
if [ "$NSERVE" = 2 ]; then sampler >"$DIR/locks" & SAMPLER=$!; fi
agents=$(IFS=,; echo "${URLS[*]}")
if [ -n "${PPROF:-}" ]; then # CPU profiles of each collector, PPROF seconds from 10 s into the run
	(sleep 10; for i in $(seq 1 "$NSERVE"); do
		curl -fs -o "${PPROF_OUT:-/tmp}/collector$i.pprof" "http://127.0.0.1:$((18800 + i))/debug/pprof/profile?seconds=$PPROF" &
	done; wait) &
fi
"$BIN" loadgen --server "${URLS[0]}" --agent-servers "$agents" --agent-token "$AT" --token "$UT" \
	--instances "$N" --breakers "$B" --interval 1s --duration "${SECS}s" --json >"$DIR/out.json" 2>"$DIR/loadgen.log"
t1=$(date +%s.%N)
if [ -n "${SAMPLER:-}" ]; then kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true; fi
pgafter=$(pgcpu)
txafter=$(txs)

python3 - "$DIR/out.json" "$(getconf CLK_TCK)" "$pgbefore" "$pgafter" "$t0" "$t1" "$DIR/locks" "$MODE" "$DIR/loadgen.log" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
hz = int(sys.argv[2])
pg = (int(sys.argv[4]) - int(sys.argv[3])) / hz
wall = float(sys.argv[6]) - float(sys.argv[5])
us = lambda ns: ns / 1000
print(f"{sys.argv[8]}: {r['instances']} x {r['breakers']}, load average {r['load_average_start']:.1f} -> {r['load_average_end']:.1f}")
print(f"acked {r['rate']:.0f}/s of {r['offered']:.0f}/s offered; refused {r['refused']}, connection errors {r['errors']}")
print(f"transition to subscriber p50 {us(r['p50'])/1000:.1f} ms, p99 {us(r['p99'])/1000:.1f} ms, max {us(r['max'])/1000:.1f} ms; seen {r['seen']} of {r['sent']}")
print(f"decode floor {us(r['decode_floor']):.2f} us")
cols = r.get('collectors') or [{'url': 'the server', 'windows': r['windows'], 'cpu_cores': r['server_cpu_cores'], 'cpu_per_report': r['cpu_per_report'], 'rss_bytes': r['peak_rss_bytes']}]
for i, c in enumerate(cols):
    ratio = c['cpu_per_report'] / r['decode_floor'] if r['decode_floor'] else 0
    print(f"collector {i+1}: {c['windows']/ (r['measured']/1e9):.0f} acked/s, {c['cpu_cores']:.2f} cores, {us(c['cpu_per_report']):.1f} us per acked report ({ratio:.1f}x the decode floor), RSS {c['rss_bytes']/1e6:.0f} MB")
if r['rate'] > 0 and sys.argv[8] != 'sqlite':
    print(f"postgresql (every postgres process on this machine, whole run of {wall:.0f} s): {pg/wall:.2f} cores, about {1e6*pg/(r['rate']*wall):.1f} us per acked report")
import re, datetime
connected = None
for l in open(sys.argv[9]):
    m = re.match(r'time=(\S+) level=INFO msg=connected', l)
    if m:
        connected = datetime.datetime.fromisoformat(m.group(1).replace('Z', '+00:00')).timestamp()
try:
    s = [l.split() for l in open(sys.argv[7]) if len(l.split()) == 2]
    def share(rows, what):
        w = sum(1 for _, n in rows if int(n) > 0)
        print(f"a collector's backend waiting on the other's, {what}: {w} of {len(rows)} samples ({100*w/max(1,len(rows)):.1f} %)")
    share(s, "whole run")
    if connected:
        # loadgen measures from about 1.5 s after every agent connected
        share([r for r in s if float(r[0]) >= connected + 1.5], "while measuring (agents connected)")
except FileNotFoundError:
    pass
PY
paste <(echo "$txbefore") <(echo "$txafter") | awk -v t0="$t0" -v t1="$t1" 'BEGIN {w = t1 - t0} {printf "collector %d: %.1f store transactions/s, %.0f operations each\n", NR, ($3-$1)/w, ($3-$1) ? ($4-$2)/($3-$1) : 0}'
if [ -n "${LOCKDETAIL:-}" ] && [ -s "$DIR/lockdetail" ]; then
	echo "waiting statement | blocker's state | blocker's last statement (samples, most first):"
	cut -d'|' -f2,4,5 "$DIR/lockdetail" | sort | uniq -c | sort -rn | head -15
fi
