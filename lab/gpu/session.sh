#!/usr/bin/env bash
# Runs several GPU proof plans back to back in one background session on the device machine, so a
# sequence longer than one call's 10-minute limit keeps the GPU busy between calls (a device call may
# last 600 s; the machine stays held while calls follow each other within its 30 s idle window).
#   bash lab/gpu/session.sh start PLAN:BUDGET_S[:VAR=VALUE;VAR=VALUE] ...   # detach (setsid) and run
#                                                          # the plans in order (VARs for that plan only)
#   bash lab/gpu/session.sh poll SECONDS               # wait until done or SECONDS passed, then copy
#                                                          # finished plans' files not sent before (RESEND=1:
#                                                          # all), at most POLL_FILES (8) a poll, smallest
#                                                          # first, and the running plan's folder so far to $OUT
# Plans are lab/gpu/proof.sh's; after lab/gpu/device.sh part1 and setup. Each poll returns
# everything finished so far, so a machine lost between calls loses only the plan then running.
set -uo pipefail
S=/tmp/gpu-session
mode=${1:-}; shift || true

case $mode in
  start)
    [ -f $S/pid ] && kill -0 "$(cat $S/pid)" 2>/dev/null && { echo "a session is already running"; exit 2; }
    rm -rf $S; mkdir -p $S/out
    printf '%s\n' "$@" > $S/plans
    setsid bash -c '
      S='"$S"'
      echo $$ > $S/pid
      while read -r item; do
        plan=${item%%:*}; rest=${item#*:}; [ "$rest" = "$item" ] && rest=560
        budget=${rest%%:*}; vars=""; [ "$budget" != "$rest" ] && vars=${rest#*:}
        echo "$(date -u +%T) start $plan (budget ${budget}s) ${vars}" >> $S/progress
        OUT=$S/out BUDGET_S=$budget env ${vars//;/ } bash lab/gpu/proof.sh "$plan" > $S/plan-$plan.txt 2>&1
        echo "$(date -u +%T) done $plan rc=$?" >> $S/progress
        cp $S/plan-$plan.txt $S/out/ 2>/dev/null
      done < $S/plans
      echo "$(date -u +%T) all done" >> $S/progress
    ' < /dev/null > $S/session.log 2>&1 &
    sleep 1
    echo "session started: $(tr '\n' ' ' < $S/plans)"
    ;;
  poll)
    secs=${1:-540}
    t0=$(date +%s)
    while [ $(( $(date +%s) - t0 )) -lt "$secs" ] && ! grep -q "all done" $S/progress 2>/dev/null; do
      sleep 5
    done
    cat $S/progress 2>/dev/null
    running=$(ls -t $S/plan-*.txt 2>/dev/null | head -1)
    [ -n "$running" ] && { echo "--- $running (tail)"; tail -15 "$running" | cut -c1-300; }
    # Only files not returned by an earlier poll (name and size), and no more than a device call
    # brings back (8 files: POLL_FILES): smallest first, so reports and raw JSON come before the
    # archives; a file left over is sent by the next poll, not marked sent and lost.
    O=${OUT:-/tmp/out}; max=${POLL_FILES:-8}
    touch $S/sent
    # the plan still running (listed in this session, not done): its folder so far, one slot
    partial=""
    while IFS= read -r item; do
      p=${item%%:*}
      grep -q "done $p " $S/progress 2>/dev/null && continue
      grep -q "start $p " $S/progress 2>/dev/null && [ -d /tmp/proof-$p ] && partial=/tmp/proof-$p
    done < $S/plans
    room=$max; [ -n "$partial" ] && room=$((max - 1))
    left=()
    while IFS= read -r f; do
      key="$(basename "$f") $(stat -c %s "$f")"
      if [ "${RESEND:-0}" = 1 ] || ! grep -qxF "$key" $S/sent; then
        if [ "$room" -gt 0 ]; then
          cp "$f" "$O/" && echo "$key" >> $S/sent && room=$((room - 1))
        else
          left+=("$(basename "$f")")
        fi
      fi
    done < <(find $S/out -maxdepth 1 -type f -printf '%s %p\n' 2>/dev/null | sort -n | cut -d' ' -f2-)
    [ ${#left[@]} -gt 0 ] && echo "left for the next poll (${#left[@]}): ${left[*]}"
    [ -n "$partial" ] && tar czf "$O/partial-$(basename "$partial").tgz" -C "$partial" . 2>/dev/null
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    ;;
  *) echo "usage: $0 start PLAN:BUDGET_S ... | poll SECONDS"; exit 1 ;;
esac
