#!/bin/sh
# alerts.sh JOB [RUNBOOK_BASE] < deploy/alerts.yml > alerts.yml writes the rules for a Prometheus
# whose scrape job for the daemon is named JOB, with runbook links under RUNBOOK_BASE (the address of
# docs/runbooks.md where the site keeps it). deploy/alerts.yml is the copy for the job
# "stands-reconciler" and the project's own docs (`make alerts`, docs/runbooks.md).
set -eu
job=${1:?usage: alerts.sh JOB [RUNBOOK_BASE]}
base=${2:-https://github.com/stands-engine/stands-reconciler/blob/main/docs/runbooks.md}
case $job in
*[!A-Za-z0-9_.:-]*) echo "alerts.sh: job name \"$job\": only letters, digits and _ . : - (a Prometheus job label)" >&2; exit 2 ;;
esac
case $base in
*'|'* | *'&'* | *'\'* | *'"'* | *' '*) echo "alerts.sh: runbook address \"$base\": no | & \\ \" or spaces" >&2; exit 2 ;;
esac
exec sed -e "s|job=\"stands-reconciler\"|job=\"$job\"|g" -e "s|scrape of job stands-reconciler|scrape of job $job|g" \
	-e "s|https://github.com/stands-engine/stands-reconciler/blob/main/docs/runbooks.md|$base|g"
