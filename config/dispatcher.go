package config

import "time"

// check reports what is wrong with the dispatcher block and parses its durations.
func (d *Dispatcher) check(ck *checker) {
	ck.durs(
		durSetting{&d.ReconcileD, d.ReconcileEvery, d.ReconcileRange, "reconcile_every"},
		durSetting{&d.LeaderTTLD, d.LeaderTTL, d.LeaderRange, "leader_ttl"},
		durSetting{&d.TimeoutGraceD, d.TimeoutGrace, d.GraceRange, "timeout_grace"},
		durSetting{&d.DisconnectD, d.DisconnectGrace, d.DisconnectRange, "disconnect_grace"},
	)
	if d.LeaderTTLD > 0 && d.LeaderTTLD < 2*time.Second {
		ck.bad(d.LeaderRange, "Invalid leader_ttl", "leader_ttl must be at least 2s: etcd sessions count in whole seconds.")
	}
	if d.Listen != "" {
		if msg := listenProblem(d.Listen, d.ListenRange.Filename != ""); msg != "" {
			ck.bad(d.ListenRange, "Invalid listen", "dispatcher listen = "+msg)
		}
	}
}
