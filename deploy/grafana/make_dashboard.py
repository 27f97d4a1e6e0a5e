# Generates deploy/grafana/shoal.json: python3 deploy/grafana/make_dashboard.py (from the repo root).
import json
panels = []
def panel(title, exprs, unit="short", w=12, legend="{{method}}"):
    i = len(panels)
    panels.append({
        "id": i + 1, "type": "timeseries", "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": w, "x": (i % 2) * 12, "y": (i // 2) * 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"refId": chr(65 + j), "expr": e, "legendFormat": l,
                     "datasource": {"type": "prometheus", "uid": "prometheus"}}
                    for j, (e, l) in enumerate(exprs)],
    })
S = '{instance=~"$instance"}'
I = 'instance=~"$instance"'
panel("Requests per second by RPC", [(f'sum by (method) (rate(shoal_rpc_requests_total{S}[$__rate_interval]))', "{{method}}")], "reqps")
panel("Latency by RPC (p50, p99)", [
    (f'histogram_quantile(0.5, sum by (method, le) (rate(shoal_rpc_latency_seconds_bucket{S}[$__rate_interval])))', "{{method}} p50"),
    (f'histogram_quantile(0.99, sum by (method, le) (rate(shoal_rpc_latency_seconds_bucket{S}[$__rate_interval])))', "{{method}} p99")], "s")
panel("Error ratio by RPC (code != OK)", [
    (f'sum by (method) (rate(shoal_rpc_requests_total{{{I}, code!="OK"}}[$__rate_interval])) / sum by (method) (rate(shoal_rpc_requests_total{S}[$__rate_interval]))', "{{method}}")], "percentunit")
panel("Partition cache hit ratio", [
    (f'sum(rate(shoal_cache_hits_total{S}[$__rate_interval])) / (sum(rate(shoal_cache_hits_total{S}[$__rate_interval])) + sum(rate(shoal_cache_misses_total{S}[$__rate_interval])))', "hit ratio")], "percentunit")
panel("Partition cache bytes", [
    (f'sum by (state) (shoal_cache_bytes{S})', "{{state}}"),
    (f'sum(shoal_cache_budget_bytes{S})', "budget")], "bytes")
panel("I/O bytes read per second by backend", [
    (f'sum by (backend) (rate(shoal_io_read_bytes_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}}")], "Bps")
panel("I/O reads and kernel submissions per second by backend", [
    (f'sum by (backend) (rate(shoal_io_reads_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}} reads"),
    (f'sum by (backend) (rate(shoal_io_submissions_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}} submissions"),
    (f'sum by (backend) (rate(shoal_io_errors_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}} errors")], "ops")
panel("I/O read latency by backend (mean kernel time per read)", [
    (f'sum by (backend) (rate(shoal_io_read_seconds_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S}) / sum by (backend) (rate(shoal_io_submissions_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}} mean"),
    (f'sum by (backend) (rate(shoal_io_expired_total{S}[$__rate_interval]) * on (instance) group_left (backend) shoal_io_backend{S})', "{{backend}} expired reads/s")], "s")
panel("CPU arena utilisation", [
    (f'sum(rate(shoal_cpu_arena_busy_seconds_total{S}[$__rate_interval])) / sum(shoal_cpu_arena_threads{S})', "busy / threads")], "percentunit")
panel("CPU arena queue and in-flight searches", [
    (f'sum(shoal_cpu_arena_queued_tasks{S})', "queued tasks"),
    (f'sum(shoal_search_inflight{S})', "searches in flight"),
    (f'sum(shoal_rpc_inflight{S})', "RPCs in flight"),
    (f'sum(shoal_cpu_arena_threads{S})', "arena threads")], "short")
panel("WAL fsync latency (p50, p99)", [
    (f'histogram_quantile(0.5, sum by (le) (rate(shoal_wal_fsync_seconds_bucket{S}[$__rate_interval])))', "p50"),
    (f'histogram_quantile(0.99, sum by (le) (rate(shoal_wal_fsync_seconds_bucket{S}[$__rate_interval])))', "p99")], "s")
panel("Vectors per collection", [(f'sum by (collection) (shoal_collection_vectors{S})', "{{collection}}")], "short")
panel("Disk bytes per collection", [(f'sum by (collection) (shoal_collection_disk_bytes{S})', "{{collection}}")], "bytes")
dash = {
    "uid": "shoal", "title": "Shoal", "schemaVersion": 39, "version": 1, "editable": True,
    "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "tags": ["shoal"],
    "templating": {"list": [{
        "name": "instance", "type": "query", "label": "instance",
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "query": {"query": "label_values(shoal_build_info, instance)", "refId": "instance"},
        "definition": "label_values(shoal_build_info, instance)",
        "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}, "refresh": 2}]},
    "annotations": {"list": []},
    "panels": panels,
}
json.dump(dash, open("deploy/grafana/shoal.json", "w"), indent=2)
print(len(panels))
