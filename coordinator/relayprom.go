package coordinator

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
)

// relayCollector puts the relay plane's figures in /metrics: what the
// root made of each relay's aggregates and messages, and the plane's own
// health (docs/RELAYS.md).
type relayCollector struct {
	s                                                         *Server
	aggregates, partsRefused, strikesRefused, quarantined     *prometheus.Desc
	partsRefusedAll, slowConsumers, disconnects, inflightByte *prometheus.Desc
}

func newRelayCollector(s *Server) *relayCollector {
	return &relayCollector{
		s: s,
		aggregates: prometheus.NewDesc("crowdtrain_relay_aggregates_total",
			"A relay's aggregates at the root, by verdict: applied, duplicate, refused (timing: a lease expired, a round closed), forged (claims no honest relay makes).", []string{"relay", "verdict"}, nil),
		partsRefused: prometheus.NewDesc("crowdtrain_relay_parts_refused_total",
			"A relay's messages refused before they made an aggregate (malformed, oversized, over its budget, quarantined).", []string{"relay"}, nil),
		strikesRefused: prometheus.NewDesc("crowdtrain_relay_strikes_refused_total",
			"Strikes in a relay's applied aggregates refused for want of evidence.", []string{"relay"}, nil),
		quarantined: prometheus.NewDesc("crowdtrain_relay_quarantined",
			"1 while the relay is quarantined.", []string{"relay"}, nil),
		partsRefusedAll: prometheus.NewDesc("crowdtrain_relay_parts_refused_all_total",
			"Every message of the aggregate stream refused before it made an aggregate, all relays together.", nil, nil),
		slowConsumers: prometheus.NewDesc("crowdtrain_relay_nats_slow_consumer_total",
			"Times the root's NATS connection fell behind on a subscription (NATS dropped messages for it).", nil, nil),
		disconnects: prometheus.NewDesc("crowdtrain_relay_nats_disconnects_total",
			"Times the root's NATS connection was lost.", nil, nil),
		inflightByte: prometheus.NewDesc("crowdtrain_relay_inflight_bytes",
			"Bytes of incomplete aggregates the root holds for the relay.", []string{"relay"}, nil),
	}
}

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.aggregates, c.partsRefused, c.strikesRefused, c.quarantined, c.partsRefusedAll,
		c.slowConsumers, c.disconnects, c.inflightByte} {
		ch <- d
	}
}

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.s.gate.Load()
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for name, r := range g.relays {
		counter(c.aggregates, r.Applied, name, aggApplied)
		counter(c.aggregates, r.Duplicates, name, aggDuplicate)
		counter(c.aggregates, r.Refused-r.Forged, name, aggRefused)
		counter(c.aggregates, r.Forged, name, aggForged)
		counter(c.partsRefused, r.PartsRefused, name)
		counter(c.strikesRefused, r.StrikesRefused, name)
		q := 0.0
		if r.Quarantined {
			q = 1
		}
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, q, name)
		ch <- prometheus.MustNewConstMetric(c.inflightByte, prometheus.GaugeValue, float64(r.inflight), name)
	}
	counter(c.partsRefusedAll, g.partsRefused)
	counter(c.slowConsumers, g.slowConsumers.Load())
	counter(c.disconnects, g.disconnects.Load())
}

// relayRoutes are the operator's relay routes; GET /api/v1/relays, the
// public list, is in routes.
func (s *Server) relayRoutes(api *mux.Router) {
	api.HandleFunc("/relays/all", s.admin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"relays": s.RelaysAdmin()})
	})).Methods(http.MethodGet)
	api.HandleFunc("/relays/credentials", s.admin(s.handleIssueRelayCredential)).Methods(http.MethodPost)
	api.HandleFunc("/relays/{name}/credential", s.admin(func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		requeued, ok, err := s.RevokeRelayCredential(name)
		switch {
		case err != nil:
			writeError(w, http.StatusConflict, "%v", err)
		case !ok:
			writeError(w, http.StatusNotFound, "relay %q holds no credential", name)
		default:
			writeJSON(w, RelayRevokeReply{Relay: name, Revoked: true, LeasesRequeued: requeued})
		}
	})).Methods(http.MethodDelete)
	api.HandleFunc("/relays/{name}/approve", s.admin(func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		ok, err := s.ApproveRelay(name, r.Method == http.MethodPost)
		switch {
		case err != nil:
			writeError(w, http.StatusConflict, "%v", err)
		case !ok:
			writeError(w, http.StatusNotFound, "no relay %q here (GET /api/v1/relays/all lists them)", name)
		default:
			writeJSON(w, map[string]any{"relay": name, "approved": r.Method == http.MethodPost})
		}
	})).Methods(http.MethodPost, http.MethodDelete)
	api.HandleFunc("/relays/{name}/quarantine", s.admin(func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		if !s.LiftRelayQuarantine(name) {
			writeError(w, http.StatusNotFound, "relay %q is not quarantined (GET /api/v1/relays/all lists them)", name)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"relay": name, "quarantined": false})
	})).Methods(http.MethodDelete)
}

// RelayCredentialRequest is the body of POST /api/v1/relays/credentials.
type RelayCredentialRequest struct {
	Name string `json:"name"`
	// URL is the websocket URL the relay's volunteers connect to: the
	// relay may advertise that one alone ("": the first it joins with).
	URL string `json:"url,omitempty"`
}

// RelayCredentialReply answers it: Credential is the file's text.
type RelayCredentialReply struct {
	Name       string `json:"name"`
	URL        string `json:"url,omitempty"`
	Credential string `json:"credential"`
}

// RelayRevokeReply answers DELETE /api/v1/relays/{name}/credential.
type RelayRevokeReply struct {
	Relay   string `json:"relay"`
	Revoked bool   `json:"revoked"`
	// LeasesRequeued counts the relay's leases queued again for others.
	LeasesRequeued int `json:"leases_requeued"`
}

func (s *Server) handleIssueRelayCredential(w http.ResponseWriter, r *http.Request) {
	var req RelayCredentialRequest
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxAdminBody))
	if err := json.Unmarshal(raw, &req); err != nil {
		writeError(w, http.StatusBadRequest, "want {\"name\": NAME, \"url\": \"wss://HOST/ws\"}: %v", err)
		return
	}
	cred, err := s.IssueRelayCredential(req.Name, req.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(RelayCredentialReply{Name: req.Name, URL: req.URL, Credential: string(cred)})
}
