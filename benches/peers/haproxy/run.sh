#!/usr/bin/env bash
# Runs the two relays that make.sh wrote into DIR in the foreground, as one process tree (so the bench's CPU
# and RSS snapshots of this process cover both), until TERM; the first line names the HAProxy version.
# Usage: run.sh DIR
set -uo pipefail
dir="$1"
haproxy -v | head -1
haproxy -db -f "$dir/b.cfg" &
b=$!
haproxy -db -f "$dir/a.cfg" &
a=$!
trap 'kill -TERM "$a" "$b" 2>/dev/null; wait' TERM INT
wait
