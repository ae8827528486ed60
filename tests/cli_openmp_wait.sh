#!/bin/bash
# flashscope-cli's OpenMP wait policy (runtime/include/flashscope/openmp_wait.hpp)
# as `info --json` reports it: on up to 4 CPUs the CLI restarts itself with
# threads that sleep at barriers; over a user's OMP_WAIT_POLICY or
# GOMP_SPINCOUNT it changes nothing; above 4 CPUs it keeps libgomp's spinning.
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
if [ "$allowed" -le 4 ]; then
  expect sleep "$allowed CPUs, nothing set" "${plain[@]}" "$cli"
else
  expect spin "$allowed CPUs, nothing set" "${plain[@]}" "$cli"
fi
if command -v taskset > /dev/null; then
  first_cpu=$(taskset -cp $$ | sed 's/.*: //;s/[-,].*//')
  expect sleep "taskset to one CPU" "${plain[@]}" taskset -c "$first_cpu" "$cli"
fi
expect spin "OMP_WAIT_POLICY=active kept" env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$cli"
expect spin "GOMP_SPINCOUNT=1000 kept" env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 "$cli"
expect sleep "OMP_WAIT_POLICY=passive kept" env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive "$cli"
exit $((fails > 0))
