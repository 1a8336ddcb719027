package coordinator

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crowdtrain/crowdtrain/protocol"
)

// promMetrics serves /metrics. Job and worker figures are read from the
// same views the API shows, at scrape time, so there is one set of
// counters, not two that could disagree.
type promMetrics struct {
	s   *Server
	reg *prometheus.Registry

	checkpointSeconds prometheus.Histogram

	applied, rejected, examples, version, accuracy, loss, staleness, workers *prometheus.Desc

	// The wire (wire.go), per job and per worker.
	jobBytesIn, jobBytesOut, jobShardBytesOut, jobBytesPerExample, jobCompression, jobUpdateCompression, jobSnapshotCompression *prometheus.Desc
	// The snapshot cache (snapcache.go).
	jobSnapCacheBytes, jobSnapCacheLimit, jobSnapCacheEvictions, jobSnapRebased                                *prometheus.Desc
	workerBytesIn, workerBytesOut, workerDownBps, workerUpBps, workerRtt, workerLocalSteps, workerCommFraction *prometheus.Desc
	// The share of the workers' time spent computing.
	jobUtilisation, workerUtilisation *prometheus.Desc
	// Disputed spot checks the coordinator recomputed (spotreferee.go).
	spotRecomputes, spotRecomputeSeconds *prometheus.Desc
	// An RL job's checks of rollouts (rlcheck.go).
	rolloutChecks *prometheus.Desc
	learnChecks   *prometheus.Desc
}

func newPromMetrics(s *Server) *promMetrics {
	m := &promMetrics{
		s:   s,
		reg: prometheus.NewRegistry(),
		checkpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "crowdtrain_checkpoint_duration_seconds",
			Help:    "Time to write one checkpoint to SQLite.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		applied:   prometheus.NewDesc("crowdtrain_updates_applied_total", "Updates applied to the model.", []string{"job"}, nil),
		rejected:  prometheus.NewDesc("crowdtrain_updates_rejected_total", "Results rejected, by reason.", []string{"job", "reason"}, nil),
		examples:  prometheus.NewDesc("crowdtrain_examples_processed_total", "Training examples in applied updates.", []string{"job"}, nil),
		version:   prometheus.NewDesc("crowdtrain_model_version", "The model's version: updates applied since version 0.", []string{"job"}, nil),
		accuracy:  prometheus.NewDesc("crowdtrain_eval_accuracy", "Test accuracy at the last evaluation.", []string{"job"}, nil),
		loss:      prometheus.NewDesc("crowdtrain_eval_loss", "Test loss at the last evaluation.", []string{"job"}, nil),
		staleness: prometheus.NewDesc("crowdtrain_staleness", "Staleness of applied updates (versions behind when applied).", []string{"job"}, nil),
		workers:   prometheus.NewDesc("crowdtrain_workers", "Connected workers, by kind.", []string{"kind"}, nil),

		jobBytesIn:             prometheus.NewDesc("crowdtrain_job_bytes_in_total", "Result frame bytes received for the job.", []string{"job"}, nil),
		jobBytesOut:            prometheus.NewDesc("crowdtrain_job_bytes_out_total", "Snapshot and delta bytes served for the job.", []string{"job"}, nil),
		jobShardBytesOut:       prometheus.NewDesc("crowdtrain_job_shard_bytes_out_total", "Shard bytes served for the job.", []string{"job"}, nil),
		jobBytesPerExample:     prometheus.NewDesc("crowdtrain_job_bytes_per_example", "(bytes in + bytes out) / examples seen.", []string{"job"}, nil),
		jobCompression:         prometheus.NewDesc("crowdtrain_job_compression", "fp32 size of the results and snapshots over the bytes they took.", []string{"job"}, nil),
		jobUpdateCompression:   prometheus.NewDesc("crowdtrain_job_update_compression", "fp32 size of the results over the bytes they took (what update_codec saves).", []string{"job"}, nil),
		jobSnapshotCompression: prometheus.NewDesc("crowdtrain_job_snapshot_compression", "fp32 size of the snapshots and deltas served over the bytes they took.", []string{"job"}, nil),
		jobSnapCacheBytes:      prometheus.NewDesc("crowdtrain_job_snapshot_cache_bytes", "Bytes of snapshot bodies and deltas the snapshot cache holds of the job.", []string{"job"}, nil),
		jobSnapCacheLimit:      prometheus.NewDesc("crowdtrain_job_snapshot_cache_limit_bytes", "The snapshot cache's bound, all jobs together (serve --snapshot-cache-mb); each job's current version is kept even past it.", []string{"job"}, nil),
		jobSnapCacheEvictions:  prometheus.NewDesc("crowdtrain_job_snapshot_cache_evictions_total", "Snapshots and deltas of the job the snapshot cache dropped for its bound, oldest first.", []string{"job"}, nil),
		jobSnapRebased:         prometheus.NewDesc("crowdtrain_job_snapshot_rebased_total", "Requests for an evicted snapshot served the current one instead.", []string{"job"}, nil),
		workerBytesIn:          prometheus.NewDesc("crowdtrain_worker_bytes_in_total", "Websocket bytes read from the worker.", []string{"worker"}, nil),
		workerBytesOut:         prometheus.NewDesc("crowdtrain_worker_bytes_out_total", "Websocket bytes to the worker, and snapshot, delta and shard bytes served to it.", []string{"worker"}, nil),
		workerDownBps:          prometheus.NewDesc("crowdtrain_worker_link_down_bps", "The worker's estimate of its download rate, bits per second (0: none yet).", []string{"worker"}, nil),
		workerUpBps:            prometheus.NewDesc("crowdtrain_worker_link_up_bps", "The worker's estimate of its upload rate, bits per second (0: none yet).", []string{"worker"}, nil),
		workerRtt:              prometheus.NewDesc("crowdtrain_worker_link_rtt_seconds", "The worker's estimate of its round trip to the coordinator.", []string{"worker"}, nil),
		workerLocalSteps:       prometheus.NewDesc("crowdtrain_worker_local_steps", "H of the worker's last lease.", []string{"worker"}, nil),
		workerCommFraction:     prometheus.NewDesc("crowdtrain_worker_comm_fraction", "Smoothed share of the worker's time spent communicating.", []string{"worker"}, nil),
		jobUtilisation:         prometheus.NewDesc("crowdtrain_job_worker_utilisation", "Mean share of the wall time of the job's workers spent computing.", []string{"job"}, nil),
		workerUtilisation:      prometheus.NewDesc("crowdtrain_worker_utilisation", "Smoothed share of the worker's wall time spent computing (its results' compute_ms over the time between them).", []string{"worker"}, nil),
		spotRecomputes: prometheus.NewDesc("crowdtrain_spot_recomputes_total",
			"Disputed spot checks the coordinator computed the third result of itself, by outcome: decided (the result entered the check), dropped (the base snapshot was gone), deferred (the check waited for the recomputations' rate bound).", []string{"job", "outcome"}, nil),
		spotRecomputeSeconds: prometheus.NewDesc("crowdtrain_spot_recompute_seconds_total", "Time the coordinator spent recomputing disputed spot checks (and RL rollouts' log-probabilities).", []string{"job"}, nil),
		rolloutChecks: prometheus.NewDesc("crowdtrain_rollout_checks_total",
			"RL rollout results drawn for a check of their log-probabilities, by outcome: matched, forged (refused, its volunteer struck), skipped_no_base (the policy version had left the snapshot cache), skipped_no_budget (the recomputations' bucket was short).", []string{"job", "outcome"}, nil),
		learnChecks: prometheus.NewDesc("crowdtrain_learn_checks_total",
			"RL learn results drawn for a check, the coordinator computing the lease again, by outcome: matched, forged (refused, its volunteer struck), skipped_no_base (the policy version had left the snapshot cache), skipped_no_budget (the recomputations' bucket was short).", []string{"job", "outcome"}, nil),
	}
	m.reg.MustRegister(m, m.checkpointSeconds, newDurabilityCollector(s), newRelayCollector(s), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *promMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func (m *promMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.applied, m.rejected, m.examples, m.version, m.accuracy, m.loss, m.staleness, m.workers,
		m.jobBytesIn, m.jobBytesOut, m.jobShardBytesOut, m.jobBytesPerExample, m.jobCompression, m.jobUpdateCompression, m.jobSnapshotCompression,
		m.jobSnapCacheBytes, m.jobSnapCacheLimit, m.jobSnapCacheEvictions, m.jobSnapRebased,
		m.workerBytesIn, m.workerBytesOut, m.workerDownBps, m.workerUpBps, m.workerRtt, m.workerLocalSteps, m.workerCommFraction,
		m.jobUtilisation, m.workerUtilisation, m.spotRecomputes, m.spotRecomputeSeconds, m.rolloutChecks, m.learnChecks} {
		ch <- d
	}
}

func (m *promMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jobs, _ := m.s.JobViews(ctx)
	for _, j := range jobs {
		ch <- prometheus.MustNewConstMetric(m.applied, prometheus.CounterValue, float64(j.UpdatesApplied), j.ID)
		for reason, n := range j.Rejections {
			ch <- prometheus.MustNewConstMetric(m.rejected, prometheus.CounterValue, float64(n), j.ID, reason)
		}
		ch <- prometheus.MustNewConstMetric(m.examples, prometheus.CounterValue, float64(j.ExamplesSeen), j.ID)
		ch <- prometheus.MustNewConstMetric(m.version, prometheus.GaugeValue, float64(j.Version), j.ID)
		if j.Eval != nil {
			ch <- prometheus.MustNewConstMetric(m.accuracy, prometheus.GaugeValue, j.Eval.Accuracy, j.ID)
			ch <- prometheus.MustNewConstMetric(m.loss, prometheus.GaugeValue, j.Eval.Loss, j.ID)
		}
		// The job keeps a count per staleness; Prometheus wants cumulative
		// buckets (the last one, "32 or more", is the +Inf bucket).
		buckets := map[float64]uint64{}
		var cum uint64
		var sum float64
		for s, n := range j.StalenessHistogram {
			cum += uint64(n)
			sum += float64(s) * float64(n)
			if s < len(j.StalenessHistogram)-1 {
				buckets[float64(s)] = cum
			}
		}
		ch <- prometheus.MustNewConstHistogram(m.staleness, cum, sum, buckets, j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobBytesIn, prometheus.CounterValue, float64(j.BytesIn), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobBytesOut, prometheus.CounterValue, float64(j.BytesOut), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobShardBytesOut, prometheus.CounterValue, float64(j.ShardBytesOut), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobBytesPerExample, prometheus.GaugeValue, j.BytesPerExample, j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobCompression, prometheus.GaugeValue, j.Compression, j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobUpdateCompression, prometheus.GaugeValue, j.UpdateCompression, j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobSnapshotCompression, prometheus.GaugeValue, j.SnapshotCompression, j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobUtilisation, prometheus.GaugeValue, j.WorkerUtilisation, j.ID)
		sc := j.SnapshotCache
		ch <- prometheus.MustNewConstMetric(m.jobSnapCacheBytes, prometheus.GaugeValue, float64(sc.Bytes), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobSnapCacheLimit, prometheus.GaugeValue, float64(sc.Limit), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobSnapCacheEvictions, prometheus.CounterValue, float64(sc.Evictions), j.ID)
		ch <- prometheus.MustNewConstMetric(m.jobSnapRebased, prometheus.CounterValue, float64(sc.Rebased), j.ID)
		if sc := j.SpotChecks; sc != nil {
			ch <- prometheus.MustNewConstMetric(m.spotRecomputes, prometheus.CounterValue, float64(sc.Recomputed), j.ID, "decided")
			ch <- prometheus.MustNewConstMetric(m.spotRecomputes, prometheus.CounterValue, float64(sc.RecomputeDropped), j.ID, "dropped")
			ch <- prometheus.MustNewConstMetric(m.spotRecomputes, prometheus.CounterValue, float64(sc.RecomputeDeferred), j.ID, "deferred")
			ch <- prometheus.MustNewConstMetric(m.spotRecomputeSeconds, prometheus.CounterValue, sc.RecomputeSeconds, j.ID)
			if r := sc.Rollouts; r != nil {
				r.collect(ch, m.rolloutChecks, j.ID)
			}
			if r := sc.Learn; r != nil {
				r.collect(ch, m.learnChecks, j.ID)
			}
		}
	}
	kinds := map[string]int{protocol.KindBrowser: 0, protocol.KindNative: 0, protocol.KindGPU: 0}
	for _, w := range m.s.WorkerViews() {
		kinds[w.Kind]++
		ch <- prometheus.MustNewConstMetric(m.workerBytesIn, prometheus.CounterValue, float64(w.BytesIn), w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerBytesOut, prometheus.CounterValue, float64(w.BytesOut), w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerDownBps, prometheus.GaugeValue, w.Link.DownBps, w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerUpBps, prometheus.GaugeValue, w.Link.UpBps, w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerRtt, prometheus.GaugeValue, w.Link.RttMs/1000, w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerLocalSteps, prometheus.GaugeValue, float64(w.LocalSteps), w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerCommFraction, prometheus.GaugeValue, w.CommFraction, w.ID)
		ch <- prometheus.MustNewConstMetric(m.workerUtilisation, prometheus.GaugeValue, w.Utilisation, w.ID)
	}
	for kind, n := range kinds {
		ch <- prometheus.MustNewConstMetric(m.workers, prometheus.GaugeValue, float64(n), kind)
	}
}

// collect sends the counts as desc's counters of job, by outcome.
func (r *RecomputeCounts) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc, job string) {
	for outcome, n := range map[string]int64{"matched": r.Checked - r.Forged, "forged": r.Forged, "skipped_no_base": r.SkippedNoBase, "skipped_no_budget": r.SkippedNoBudget} {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), job, outcome)
	}
}
