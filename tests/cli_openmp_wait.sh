#!/bin/bash
# The OpenMP wait policy as flashscope-cli's `info --json` reports it
# (CpuThreads::wait): libgomp's spinning unless OMP_WAIT_POLICY or
# GOMP_SPINCOUNT says otherwise; the CLI never changes it (openmp_wait.hpp).
# usage: cli_openmp_wait.sh FLASHSCOPE_CLI
set -u
cli=$1
fails=0
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
cpu_line() { "$@" info --json | grep '"openmp_wait"'; }
expect() {  # expect WANT LABEL COMMAND...
  local want=$1 label=$2
  shift 2
  local got
  got=$(cpu_line "$@" | field openmp_wait)
  if [ "$got" != "$want" ]; then
    echo "FAIL: $label: openmp_wait is '$got', want '$want'"
    fails=$((fails + 1))
  else
    echo "ok: $label: $got"
  fi
}
plain=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
allowed=$(cpu_line "${plain[@]}" "$cli" | field cpus_allowed)
if [ -z "$allowed" ]; then
  echo "FAIL: info --json has no cpus_allowed"
  exit 1
fi
expect spin "$allowed CPUs, nothing set" "${plain[@]}" "$cli"
expect spin "OMP_WAIT_POLICY=active kept" env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$cli"
expect spin "GOMP_SPINCOUNT=1000 kept" env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 "$cli"
expect sleep "OMP_WAIT_POLICY=passive kept" env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive "$cli"
exit $((fails > 0))
