# Sourced by the serve_*.sh e2e scripts after lib.bash: the server helpers of server_lib.bash
# (start_server, stop_server, post, jget) plus /metrics readers.
source "$(dirname "${BASH_SOURCE[0]}")/server_lib.bash"

# metric NAME_WITH_LABELS: its value in a fresh /metrics scrape ("" when absent).
metric() { curl -s --max-time 5 "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# wait_metric NAME VALUE [TENTHS]: polls until the metric equals VALUE (default at most 10 s).
wait_metric() {
  for _ in $(seq 1 "${3:-100}"); do
    [ "$(metric "$1")" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
