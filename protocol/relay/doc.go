// Package relay is what a relay and the root coordinator say to each
// other over NATS: the subjects, the control messages (JSON) and the
// aggregates (a JSON header and the summed update as float32s), split
// into parts when one does not fit the server's payload limit.
//
// A relay joins (Join), leases blocks of tasks (LeaseRequest), reports
// its workers (Status) and publishes one Aggregate per round or per
// relay window to the JetStream stream Stream. The root announces each
// job's new versions on VersionSubject. Nothing here knows sockets or
// jobs; coordinator speaks it on both sides.
package relay
