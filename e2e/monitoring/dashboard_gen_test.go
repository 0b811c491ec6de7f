package monitoring

// The dashboard is generated from the description below so that every panel
// gets the same datasource, the same filters and a layout without gaps or
// overlaps; TestDashboardUpToDate compares dashboard.json with it, and
// `go test ./monitoring -run TestDashboardUpToDate -update` rewrites the
// file. Edit here, not in the JSON (or edit in Grafana, export, and port
// the change here).

import (
	"bytes"
	"encoding/json"
)

// Filters every query carries: the job (the scrape's target label) and, for
// the pipeline's instruments, the pipeline.
const (
	fJob      = `job=~"$job"`
	fPipeline = `job=~"$job", pipeline=~"$pipeline"`
	rateWin   = `[$__rate_interval]`
)

type genTarget struct {
	expr, legend string
}

type genPanel struct {
	typ         string // timeseries (default), stat, state-timeline
	title       string
	description string
	unit        string
	w, h        int
	targets     []genTarget
	stack       bool
	bars        bool
	overrides   []any
	options     map[string]any // merged into the panel's options
	defaults    map[string]any // merged into fieldConfig.defaults
}

type genRow struct {
	title  string
	panels []genPanel
}

func datasource() map[string]any {
	return map[string]any{"type": "prometheus", "uid": "${datasource}"}
}

// override returns a field override for series whose display name matches
// the regular expression.
func override(nameRegexp string, props ...map[string]any) map[string]any {
	ps := make([]any, len(props))
	for i, p := range props {
		ps[i] = p
	}
	return map[string]any{
		"matcher":    map[string]any{"id": "byRegexp", "options": nameRegexp},
		"properties": ps,
	}
}

func prop(id string, value any) map[string]any { return map[string]any{"id": id, "value": value} }

func fixedColor(c string) map[string]any {
	return prop("color", map[string]any{"mode": "fixed", "fixedColor": c})
}

var dashed = prop("custom.lineStyle", map[string]any{"fill": "dash", "dash": []int{10, 10}})

func rightAxis(unit string) []map[string]any {
	return []map[string]any{prop("unit", unit), prop("custom.axisPlacement", "right")}
}

// dashboardRows describes the dashboard: rows of panels, laid out left to
// right on Grafana's 24-column grid.
func dashboardRows() []genRow {
	outcomeColors := []any{
		override("ok", fixedColor("green")),
		override("conflict|not_found", fixedColor("yellow")),
		override("forbidden|unauthorized|invalid", fixedColor("red")),
		override("timeout|error", fixedColor("orange")),
		override("throttled", fixedColor("purple")),
		override("canceled", fixedColor("blue")),
		override("fenced|abandoned", fixedColor("light-blue")),
	}
	return []genRow{
		{title: "Overview", panels: []genPanel{
			{
				typ: "stat", title: "Leader", w: 6, h: 4,
				description: "Identity of the replica holding the Lease (quietpatch_leader_is_leader == 1). " +
					"Empty: no replica holds it; if that lasts more than twice the lease duration, QuietpatchNoLeader fires.",
				targets: []genTarget{{`max by (identity) (quietpatch_leader_is_leader{` + fJob + `}) == 1`, `{{identity}}`}},
				options: map[string]any{"textMode": "name", "colorMode": "none"},
			},
			{
				typ: "stat", title: "Leadership epoch", w: 6, h: 4, unit: "none",
				description: "Epoch of the latest claim of the Lease. It changes every time a replica (re)acquires the Lease. " +
					"Every patch is built and sent under one epoch: a call about to start once calls of a newer epoch have begun is dropped " +
					"(reason stale_epoch), never made.",
				targets:  []genTarget{{`max(quietpatch_leader_epoch{` + fJob + `})`, `epoch`}},
				defaults: map[string]any{"decimals": 0},
			},
			{
				typ: "stat", title: "Patches/s applied", w: 6, h: 4, unit: "ops",
				description: "Status patches the API server accepted per second (outcome ok), over the selected pipelines.",
				targets:     []genTarget{{`sum(rate(quietpatch_dispatch_patches_total{` + fPipeline + `, outcome="ok"}` + rateWin + `))`, `ok`}},
			},
			{
				typ: "stat", title: "Queue fill (Peak-EWMA / lane capacity)", w: 6, h: 4, unit: "percentunit",
				description: "Peak-EWMA of the keys waiting (both lanes) as a share of the capacity of one lane, highest pipeline and replica; " +
					"it can exceed 100%. Above 80% for 15 minutes fires QuietpatchQueueSaturated.",
				targets: []genTarget{{`max(quietpatch_queue_depth_peak_ewma{` + fPipeline + `} / quietpatch_queue_capacity{` + fPipeline + `})`, `fill`}},
				defaults: map[string]any{"min": 0, "thresholds": map[string]any{"mode": "absolute", "steps": []any{
					map[string]any{"color": "green", "value": nil},
					map[string]any{"color": "yellow", "value": 0.5},
					map[string]any{"color": "red", "value": 0.8},
				}}},
				options: map[string]any{"colorMode": "value"},
			},
		}},
		{title: "Queue", panels: []genPanel{
			{
				title: "Queue depth vs Peak-EWMA vs capacity", w: 12, h: 8, unit: "none",
				description: "Keys waiting in the bounded queue, both lanes (fresh: events; pass: periodic passes); a key waits at most once, " +
					"so the depth never exceeds the number of objects. Capacity is per lane (fixed; it does not follow the drain rate). " +
					"The depth is a sample taken at scrape time and misses the bursts between scrapes; " +
					"the Peak-EWMA (time constant 10 s) is updated at every insertion and removal, so it rises with each burst at once and decays after it. " +
					"Healthy: it rises when a pass finds objects changed and falls once their patches are sent. Staying near the capacity line means the " +
					"dispatcher does not keep up (QuietpatchQueueSaturated) and passes halt once the pass lane is full. " +
					"Highest replica: only the leader fills its queue.",
				targets: []genTarget{
					{`max by (pipeline) (quietpatch_queue_depth{` + fPipeline + `})`, `{{pipeline}} depth`},
					{`max by (pipeline) (quietpatch_queue_depth_peak_ewma{` + fPipeline + `})`, `{{pipeline}} Peak-EWMA`},
					{`max by (pipeline) (quietpatch_queue_capacity{` + fPipeline + `})`, `{{pipeline}} capacity`},
				},
				overrides: []any{override(".* capacity", dashed, fixedColor("red"))},
			},
			{
				title: "Queue flow", w: 12, h: 8, unit: "ops",
				description: "Keys added to the queue (enqueued, coalesced ones included), delivered to the dispatcher (dequeued), " +
					"and added while already waiting (superseded: coalesced, no extra slot; the patch is built when the key is served, " +
					"from the object as it is then).",
				targets: []genTarget{
					{`sum by (pipeline) (rate(quietpatch_queue_enqueued_total{` + fPipeline + `}` + rateWin + `))`, `{{pipeline}} enqueued`},
					{`sum by (pipeline) (rate(quietpatch_queue_dequeued_total{` + fPipeline + `}` + rateWin + `))`, `{{pipeline}} dequeued`},
					{`sum by (pipeline) (rate(quietpatch_queue_superseded_total{` + fPipeline + `}` + rateWin + `))`, `{{pipeline}} superseded`},
				},
			},
			{
				title: "Adds refused (queue full or closed)", w: 12, h: 8, unit: "ops", stack: true,
				description: "Keys the queue refused, by reason: full (the lane had no free slot: a pass halts there and resumes, after the last " +
					"object handled, as soon as half of the pass lane is free; an event whose keys find the fresh lane full makes a pass instead), " +
					"closed (shutdown). A key already waiting is never refused: it coalesces.",
				targets: []genTarget{
					{`sum by (pipeline, reason) (rate(quietpatch_queue_dropped_total{` + fPipeline + `}` + rateWin + `))`, `{{pipeline}} {{reason}}`},
				},
			},
			{
				title: "Queue wait p50 / p99", w: 12, h: 8, unit: "s",
				description: "Time from a key's first add to its delivery to the dispatcher, which then builds its patch and sends it at once. " +
					"Close to the reconcile interval means statuses lag by a whole pass.",
				targets: []genTarget{
					{`histogram_quantile(0.5, sum by (pipeline, le) (rate(quietpatch_queue_wait_seconds_bucket{` + fPipeline + `}` + rateWin + `)))`, `{{pipeline}} p50`},
					{`histogram_quantile(0.99, sum by (pipeline, le) (rate(quietpatch_queue_wait_seconds_bucket{` + fPipeline + `}` + rateWin + `)))`, `{{pipeline}} p99`},
				},
			},
		}},
		{title: "Dispatch", panels: []genPanel{
			{
				title: "Patches/s by outcome", w: 12, h: 8, unit: "ops", stack: true,
				description: "Status patch calls by outcome, over the selected pipelines. conflict: the object changed since it was read " +
					"(resourceVersion precondition; the next pass recomputes). forbidden/unauthorized: RBAC or credentials " +
					"(QuietpatchPatchesForbidden). timeout: the call reached min(patch timeout, claim left) (QuietpatchPatchTimeouts). " +
					"throttled: 429 from the server's priority and fairness. fenced and abandoned: see the panel of the server's fence. " +
					"A failed patch is not retried in a loop: the next pass recomputes it.",
				targets:   []genTarget{{`sum by (outcome) (rate(quietpatch_dispatch_patches_total{` + fPipeline + `}` + rateWin + `))`, `{{outcome}}`}},
				overrides: outcomeColors,
			},
			{
				title: "Patch latency p50 / p99", w: 12, h: 8, unit: "s",
				description: "Duration of status patch calls, all outcomes (timeouts included, at their deadline). " +
					"Compare p99 with the patch timeout (--patch-timeout, 5 s by default).",
				targets: []genTarget{
					{`histogram_quantile(0.5, sum by (pipeline, le) (rate(quietpatch_dispatch_duration_seconds_bucket{` + fPipeline + `}` + rateWin + `)))`, `{{pipeline}} p50`},
					{`histogram_quantile(0.99, sum by (pipeline, le) (rate(quietpatch_dispatch_duration_seconds_bucket{` + fPipeline + `}` + rateWin + `)))`, `{{pipeline}} p99`},
				},
			},
			{
				title: "In flight vs adaptive limit, latency estimate", w: 12, h: 8, unit: "none",
				description: "Patch calls in progress against the dispatcher's adaptive in-flight limit (left axis), and the Peak-EWMA " +
					"of the patch latency the limit is computed from (right axis). The limit backs off on 429s and timeouts and grows while the " +
					"latency estimate stays low. In flight pinned at the limit with keys waiting: the API server is the bottleneck.",
				targets: []genTarget{
					{`max by (pipeline) (quietpatch_dispatch_in_flight{` + fPipeline + `})`, `{{pipeline}} in flight`},
					{`max by (pipeline) (quietpatch_dispatch_limit{` + fPipeline + `})`, `{{pipeline}} limit`},
					{`max by (pipeline) (quietpatch_dispatch_latency_peak_ewma_seconds{` + fPipeline + `})`, `{{pipeline}} latency estimate`},
				},
				overrides: []any{
					override(".* limit", dashed, fixedColor("red")),
					override(".* latency estimate", rightAxis("s")...),
				},
			},
			{
				title: "Throttling: 429s and Retry-After waits", w: 12, h: 8, unit: "ops",
				description: "Patches the API server refused with 429 Too Many Requests (API Priority and Fairness), and the Retry-After " +
					"waits the dispatcher honoured before its next call (left axis); the time left before any patch call may start " +
					"(right axis, a scrape-time sample). Sustained: the server protects itself from this client; " +
					"lower --workers or check the FlowSchema/PriorityLevelConfiguration that matches the controller's ServiceAccount.",
				targets: []genTarget{
					{`sum by (pipeline) (rate(quietpatch_dispatch_patches_total{` + fPipeline + `, outcome="throttled"}` + rateWin + `))`, `{{pipeline}} 429`},
					{`sum by (pipeline) (rate(quietpatch_dispatch_retry_after_total{` + fPipeline + `}` + rateWin + `))`, `{{pipeline}} Retry-After waits`},
					{`max by (pipeline) (quietpatch_dispatch_backoff_seconds{` + fPipeline + `})`, `{{pipeline}} back-off left`},
				},
				overrides: []any{
					override(".* back-off left", rightAxis("s")...),
				},
			},
			{
				title: "Writes the API server fenced or abandoned", w: 12, h: 8, unit: "short", stack: true,
				description: "Status patches the API server itself stopped, per 10 minutes; no alert fires on them. fenced: the fence (a " +
					"ValidatingAdmissionPolicy whose param is the Lease, deploy/fence, with --fence) refused a write whose writer no longer held " +
					"its Lease: it was not done, and the successor writes the status. abandoned: the server gave the call up at the deadline the " +
					"controller sent (504): a call that outlived its claim, for instance a process paused while it sent. A few around a failover " +
					"or a pause are the fence at work; a steady rate of abandoned calls means the server does not finish patches within " +
					"--patch-timeout (see the latency panel).",
				targets: []genTarget{{`sum by (pipeline, outcome) (increase(quietpatch_dispatch_patches_total{` + fPipeline + `, outcome=~"fenced|abandoned"}[10m]))`, `{{pipeline}} {{outcome}}`}},
				bars:    true,
			},
			{
				title: "Keys served without a call, by reason", w: 12, h: 8, unit: "ops", stack: true,
				description: "Keys the dispatcher took from the queue and sent no patch for. Normal: unchanged (dashed, not stacked: the status was " +
					"already right when the key was served), echoes (dashed: events of our own writes, about one per patch applied, not served at all " +
					"— with a Patcher that does not report the written version they are served and end unchanged), deleted (the object " +
					"is gone), held (served again before the cache held our own last write of it: it waits for that write's event, at most " +
					"a second), released and shutdown (the Lease given up on purpose, the process stopping). Worth a look: error (the Source or the " +
					"StatusComputer failed or panicked; QuietpatchStatusErrors when it lasts), and not_leader, claim_ending or stale_epoch on the " +
					"replica that leads (its claim was found expired, nearly over or superseded: late renewals or a flapping Lease; " +
					"QuietpatchDropsWhileLeading). A replica that loses the Lease drops the keys still waiting as not_leader, once.",
				targets: []genTarget{
					{`sum by (reason) (rate(quietpatch_dispatch_dropped_total{` + fPipeline + `}` + rateWin + `))`, `{{reason}}`},
					{`sum(rate(quietpatch_dispatch_echoes_total{` + fPipeline + `}` + rateWin + `))`, `echoes`},
				},
				overrides: []any{
					override("echoes", dashed, fixedColor("purple"), prop("custom.stacking", map[string]any{"mode": "none", "group": "A"}), prop("custom.fillOpacity", 0)),
					override("unchanged", dashed, fixedColor("green"), prop("custom.stacking", map[string]any{"mode": "none", "group": "A"}), prop("custom.fillOpacity", 0)),
					override("deleted|held|released|shutdown", fixedColor("blue")),
					override("error", fixedColor("red")),
					override("not_leader|claim_ending|stale_epoch", fixedColor("orange")),
				},
			},
		}},
		{title: "Reconcile", panels: []genPanel{
			{
				title: "Pass duration p50 / p99 (completed passes)", w: 8, h: 8, unit: "s",
				description: "How long a full reconcile pass over all objects takes (compute and compare the statuses, queue the keys of " +
					"changed objects; no patch is built). " +
					"Approaching the reconcile interval (10 s by default) means passes run back to back.",
				targets: []genTarget{
					{`histogram_quantile(0.5, sum by (pipeline, le) (rate(quietpatch_reconcile_duration_seconds_bucket{` + fPipeline + `, result="completed"}` + rateWin + `)))`, `{{pipeline}} p50`},
					{`histogram_quantile(0.99, sum by (pipeline, le) (rate(quietpatch_reconcile_duration_seconds_bucket{` + fPipeline + `, result="completed"}` + rateWin + `)))`, `{{pipeline}} p99`},
				},
			},
			{
				title: "Passes per minute by result, and halts", w: 8, h: 8, unit: "short", stack: true,
				description: "Reconcile passes by how they ended: completed, halted (the pass lane was full: logged at most once a minute; the " +
					"next pass starts as soon as half of the lane is free and resumes after the last object handled; QuietpatchReconcileHalting when " +
					"it keeps happening), not_leader (leadership lost during the pass), error (listing failed), canceled, closed. " +
					"The dashed line counts halts from the halted counter.",
				targets: []genTarget{
					{`60 * sum by (result) (rate(quietpatch_reconcile_passes_total{` + fPipeline + `}` + rateWin + `))`, `{{result}}`},
					{`60 * sum(rate(quietpatch_reconcile_halted_total{` + fPipeline + `}` + rateWin + `))`, `halts (pass lane full)`},
				},
				overrides: []any{override("halts.*", dashed, fixedColor("red"), prop("custom.stacking", map[string]any{"mode": "none", "group": "A"}), prop("custom.fillOpacity", 0))},
			},
			{
				title: "Objects/s by result", w: 8, h: 8, unit: "ops", stack: true,
				description: "Per object and pass: unchanged (desired equals current; nothing queued), changed (its key was queued in the " +
					"pass lane, or was waiting already; the dispatcher builds the patch when it sends it), error (computing the status failed; " +
					"QuietpatchStatusErrors when it lasts). In steady state almost everything is unchanged.",
				targets: []genTarget{{`sum by (result) (rate(quietpatch_reconcile_objects_total{` + fPipeline + `}` + rateWin + `))`, `{{result}}`}},
			},
		}},
		{title: "Leader", panels: []genPanel{
			{
				typ: "state-timeline", title: "Leader identity", w: 12, h: 7,
				description: "Which replica held the Lease when (quietpatch_leader_is_leader per identity). Gaps with no leader longer " +
					"than twice the lease duration fire QuietpatchNoLeader. The leader panels are not filtered by pipeline: the " +
					"Lease belongs to the process.",
				targets: []genTarget{{`max by (identity) (quietpatch_leader_is_leader{` + fJob + `})`, `{{identity}}`}},
				defaults: map[string]any{
					"mappings": []any{map[string]any{"type": "value", "options": map[string]any{
						"0": map[string]any{"text": "standby", "color": "transparent", "index": 0},
						"1": map[string]any{"text": "leader", "color": "green", "index": 1},
					}}},
					"color": map[string]any{"mode": "thresholds"},
				},
				options: map[string]any{"showValue": "never", "mergeValues": true, "rowHeight": 0.8},
			},
			{
				title: "Leadership epoch", w: 6, h: 7, unit: "none",
				description: "Epoch of the latest claim each Lease had, as observed. A step is a new claim: a failover, or a replica that lost and regained it.",
				targets:     []genTarget{{`max by (k8s_namespace_name, k8s_lease_name) (quietpatch_leader_epoch{` + fJob + `})`, `{{k8s_namespace_name}}/{{k8s_lease_name}}`}},
				defaults:    map[string]any{"decimals": 0},
			},
			{
				title: "Leadership transitions", w: 6, h: 7, unit: "short", bars: true,
				description: "Claims acquired and lost by the replicas, per interval. Frequent pairs: renewals fail or come late (see Lease requests).",
				targets:     []genTarget{{`sum by (direction) (increase(quietpatch_leader_transitions_total{` + fJob + `}` + rateWin + `))`, `{{direction}}`}},
			},
			{
				title: "Lease requests/s by operation and result", w: 24, h: 7, unit: "ops",
				description: "Requests the lease loop makes (get, create, acquire, renew, vacate, watch) by result. Errors on renew precede lost " +
					"claims; forbidden means the Role in deploy/rbac.yaml does not match --lease-namespace/--lease-name.",
				targets: []genTarget{{`sum by (operation, result) (rate(quietpatch_leader_requests_total{` + fJob + `}` + rateWin + `))`, `{{operation}} {{result}}`}},
			},
		}},
		{title: "Shards", panels: []genPanel{
			{
				title: "Shards held and run per replica", w: 12, h: 7, unit: "short",
				description: "Sharded pipelines only (quietpatch.NewSharded, K > 1; empty otherwise). Held: shards whose Lease this replica " +
					"leads; run (dashed): shards it runs an informer and a pipeline for, leading them or competing while their cache syncs. " +
					"A replica holds at most ceil(K / replicas alive); after a replica joins, the one holding the most gives one shard up at a time. " +
					"Each shard's pipeline instruments carry the group's pipeline label plus shard=\"<i>\".",
				targets: []genTarget{
					{`max by (identity) (quietpatch_shard_held{` + fJob + `})`, `{{identity}} held`},
					{`max by (identity) (quietpatch_shard_running{` + fJob + `})`, `{{identity}} run`},
				},
				overrides: []any{override(".* run", dashed)},
			},
			{
				title: "Replicas in the shard group", w: 6, h: 7, unit: "short",
				description: "Replicas alive as each replica sees the membership Leases (<lease name>-member-<hash>, renewed like a claim, " +
					"deleted on shutdown, alive while it changed less than its lease duration ago on the observer's clock), fewest and most " +
					"over the replicas. They differ for at most one list period (--retry-period) after a change; apart for longer, " +
					"some replica cannot list or renew Leases.",
				targets: []genTarget{
					{`min by (pipeline) (quietpatch_shard_members{` + fJob + `})`, `{{pipeline}} fewest seen`},
					{`max by (pipeline) (quietpatch_shard_members{` + fJob + `})`, `{{pipeline}} most seen`},
				},
				defaults: map[string]any{"decimals": 0},
			},
			{
				title: "Shard moves", w: 6, h: 7, unit: "short", bars: true,
				description: "Shards acquired, given up on purpose (rebalancing after a replica joined) and lost (a claim ran out or was taken), " +
					"per interval, over the replicas. Each move costs the taker a list of the shard's range and a full pass over it. " +
					"A rollout moves about twice K shards within minutes; given_up and lost lasting 25 minutes fire QuietpatchShardsThrashing.",
				targets: []genTarget{{`sum by (direction) (increase(quietpatch_shard_moves_total{` + fJob + `}` + rateWin + `))`, `{{direction}}`}},
			},
			{
				title: "Shard caches", w: 12, h: 7, unit: "short",
				description: "Objects in the caches of the shards each replica runs: about the resource's objects times running / K when " +
					"the API server filters by ShardSelector (feature gate ShardedListAndWatch). Unfiltered (dashed, 0 or 1): the server " +
					"returned objects outside a shard's range, so each shard's cache lists and watches everything and filters client-side — " +
					"memory still holds only the shard, the transfer does not shrink.",
				targets: []genTarget{
					{`max by (identity) (quietpatch_shard_objects{` + fJob + `})`, `{{identity}} objects`},
					{`max by (identity) (quietpatch_shard_unfiltered{` + fJob + `})`, `{{identity}} unfiltered`},
				},
				overrides: []any{override(".* unfiltered", dashed)},
			},
			{
				typ: "state-timeline", title: "Shard Leases led", w: 12, h: 8,
				description: "Per shard Lease (<lease name>-shard-<i>-of-<K>), whether some replica leads it (quietpatch_leader_is_leader, " +
					"highest over the replicas running the shard). Only the replicas running a shard report its Lease: a gap is a shard that " +
					"no replica runs. Unled or missing for four lease durations fires QuietpatchShardUnheld.",
				targets: []genTarget{{`max by (k8s_lease_name) (quietpatch_leader_is_leader{` + fJob + `, k8s_lease_name=~".+-shard-[0-9]+-of-[0-9]+"})`, `{{k8s_lease_name}}`}},
				defaults: map[string]any{
					"mappings": []any{map[string]any{"type": "value", "options": map[string]any{
						"0": map[string]any{"text": "unheld", "color": "red", "index": 0},
						"1": map[string]any{"text": "led", "color": "green", "index": 1},
					}}},
					"color": map[string]any{"mode": "thresholds"},
				},
				options: map[string]any{"showValue": "never", "mergeValues": true, "rowHeight": 0.8},
			},
			{
				title: "Shard leader per Lease", w: 12, h: 8, unit: "none",
				description: "Which replica leads each shard Lease: one line per shard Lease and leading identity, at 1 while it leads. " +
					"A line that moves from one identity to another is a shard move.",
				targets:  []genTarget{{`max by (k8s_lease_name, identity) (quietpatch_leader_is_leader{` + fJob + `, k8s_lease_name=~".+-shard-[0-9]+-of-[0-9]+"}) == 1`, `{{k8s_lease_name}} {{identity}}`}},
				defaults: map[string]any{"decimals": 0, "max": 1},
			},
		}},
		{title: "Process", panels: []genPanel{
			{
				title: "Memory", w: 12, h: 7, unit: "bytes",
				description: "Resident memory and Go heap in use per replica. With a bounded queue this stays flat whatever the API server does: " +
					"informer caches, at most the capacity of each lane in keys, and one patch per call in flight (patches are built when sent).",
				targets: []genTarget{
					{`process_resident_memory_bytes{` + fJob + `}`, `{{instance}} resident`},
					{`go_memstats_heap_inuse_bytes{` + fJob + `}`, `{{instance}} heap in use`},
				},
			},
			{
				title: "CPU", w: 6, h: 7, unit: "short",
				description: "CPU used per replica, in cores.",
				targets:     []genTarget{{`rate(process_cpu_seconds_total{` + fJob + `}` + rateWin + `)`, `{{instance}}`}},
			},
			{
				title: "Goroutines", w: 6, h: 7, unit: "short",
				description: "Goroutines per replica; a steady climb is a leak.",
				targets:     []genTarget{{`go_goroutines{` + fJob + `}`, `{{instance}}`}},
			},
		}},
	}
}

// generateDashboard renders dashboardRows as Grafana's dashboard JSON model.
func generateDashboard() ([]byte, error) {
	var panels []any
	id, y := 1, 0
	for _, row := range dashboardRows() {
		panels = append(panels, map[string]any{
			"type": "row", "id": id, "title": row.title, "collapsed": false, "panels": []any{},
			"gridPos": map[string]any{"h": 1, "w": 24, "x": 0, "y": y},
		})
		id++
		y++
		x, lineH := 0, 0
		for _, p := range row.panels {
			if x+p.w > 24 {
				x, y, lineH = 0, y+lineH, 0
			}
			panels = append(panels, renderPanel(p, id, x, y))
			id++
			x += p.w
			lineH = max(lineH, p.h)
		}
		y += lineH
	}
	d := map[string]any{
		"title":         "quietpatch: status patching pipeline",
		"uid":           "quietpatch-pipeline",
		"description":   "Queue, dispatcher, reconciler and Lease of controllers built on quietpatch (github.com/quietpatch/quietpatch), e.g. the HTTPRoute status example. Each panel's description says what it means; the example's README, section Monitoring, says what to do.",
		"tags":          []string{"quietpatch", "kubernetes", "controller"},
		"editable":      true,
		"graphTooltip":  1, // shared crosshair
		"refresh":       "30s",
		"schemaVersion": 39,
		"version":       1,
		"time":          map[string]any{"from": "now-3h", "to": "now"},
		"timepicker":    map[string]any{},
		"timezone":      "browser",
		"links":         []any{},
		"panels":        panels,
		"annotations": map[string]any{"list": []any{
			map[string]any{
				"builtIn": 1, "type": "dashboard", "name": "Annotations & Alerts", "enable": true, "hide": true,
				"datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"}, "iconColor": "rgba(0, 211, 255, 1)",
			},
			map[string]any{
				"name": "Leadership changes", "enable": true, "hide": false, "iconColor": "orange",
				"datasource":  datasource(),
				"expr":        `max by (k8s_namespace_name, k8s_lease_name) (changes(quietpatch_leader_epoch{` + fJob + `}` + rateWin + `)) > 0`,
				"step":        "",
				"titleFormat": "New leadership epoch",
				"textFormat":  "Lease {{k8s_namespace_name}}/{{k8s_lease_name}}",
			},
		}},
		"templating": map[string]any{"list": []any{
			map[string]any{
				"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
				"current": map[string]any{}, "hide": 0, "includeAll": false, "multi": false, "options": []any{}, "refresh": 1, "regex": "",
			},
			queryVariable("job", "Job", `label_values(quietpatch_queue_capacity, job)`),
			queryVariable("pipeline", "Pipeline", `label_values(quietpatch_queue_capacity{job=~"$job"}, pipeline)`),
		}},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep PromQL's < > & readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func queryVariable(name, label, query string) map[string]any {
	return map[string]any{
		"name": name, "label": label, "type": "query",
		"datasource": datasource(),
		"definition": query,
		"query":      map[string]any{"query": query, "refId": "StandardVariableQuery"},
		"current":    map[string]any{}, "hide": 0, "includeAll": true, "multi": true, "options": []any{},
		"refresh": 2, // on time range change
		"regex":   "", "sort": 1,
	}
}

func renderPanel(p genPanel, id, x, y int) map[string]any {
	typ := p.typ
	if typ == "" {
		typ = "timeseries"
	}
	var targets []any
	for i, t := range p.targets {
		targets = append(targets, map[string]any{
			"refId": string(rune('A' + i)), "datasource": datasource(), "expr": t.expr, "legendFormat": t.legend,
			"range": true, "instant": false,
		})
	}
	defaults := map[string]any{}
	if p.unit != "" {
		defaults["unit"] = p.unit
	}
	options := map[string]any{}
	switch typ {
	case "timeseries":
		stacking := "none"
		if p.stack {
			stacking = "normal"
		}
		draw := "line"
		if p.bars {
			draw = "bars"
		}
		defaults["min"] = 0
		defaults["custom"] = map[string]any{
			"drawStyle": draw, "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false,
			"stacking": map[string]any{"mode": stacking, "group": "A"},
		}
		options["legend"] = map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true}
		options["tooltip"] = map[string]any{"mode": "multi", "sort": "desc"}
	case "stat":
		options["reduceOptions"] = map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}
		options["graphMode"] = "none"
		options["justifyMode"] = "auto"
		options["textMode"] = "value"
		options["colorMode"] = "none"
	case "state-timeline":
		options["legend"] = map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": false}
		options["tooltip"] = map[string]any{"mode": "single", "sort": "none"}
	}
	for k, v := range p.defaults {
		defaults[k] = v
	}
	for k, v := range p.options {
		options[k] = v
	}
	overrides := p.overrides
	if overrides == nil {
		overrides = []any{}
	}
	return map[string]any{
		"type": typ, "id": id, "title": p.title, "description": p.description,
		"datasource":  datasource(),
		"gridPos":     map[string]any{"h": p.h, "w": p.w, "x": x, "y": y},
		"fieldConfig": map[string]any{"defaults": defaults, "overrides": overrides},
		"options":     options,
		"targets":     targets,
	}
}
