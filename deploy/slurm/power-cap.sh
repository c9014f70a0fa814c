#!/bin/sh
# Applies a wattledger power cap to a job's GPUs (Prolog) and restores their default limit
# (Epilog). job_submit.lua writes the cap into the job's admin comment as
# wattledger:power_cap_w=<W per GPU> when admission admitted the job only at that cap.
#
# slurm.conf:  Prolog=/etc/slurm/power-cap.sh prolog   (PrologFlags=Alloc is not needed)
#              Epilog=/etc/slurm/power-cap.sh epilog
# Both run as root on the job's nodes, with SLURM_JOB_ID and SLURM_JOB_GPUS (the GPU indices
# allocated on this node) set by slurmd. A cap the GPU refuses (below its minimum limit) is
# logged and the job runs uncapped: admission's estimate then errs low, which the site's
# measured draw corrects on the next decisions.
set -u
mode=${1:-prolog}
gpus=${SLURM_JOB_GPUS:-}
[ -n "$gpus" ] || exit 0
case "$mode" in
prolog)
    cap=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null |
        grep -o 'wattledger:power_cap_w=[0-9]*' | head -n 1 | cut -d= -f2)
    [ -n "$cap" ] || exit 0
    if ! nvidia-smi -i "$gpus" -pl "$cap" >/dev/null 2>&1; then
        logger -t wattledger "job $SLURM_JOB_ID: nvidia-smi -pl $cap on GPUs $gpus failed; running uncapped"
    fi
    ;;
epilog)
    # Only GPUs whose limit is not their default are reset.
    for i in $(echo "$gpus" | tr ',' ' '); do
        set -- $(nvidia-smi -i "$i" --query-gpu=power.limit,power.default_limit \
            --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | tr ',' ' ')
        [ $# -eq 2 ] && [ "$1" != "$2" ] && nvidia-smi -i "$i" -pl "$2" >/dev/null 2>&1
    done
    ;;
esac
exit 0
