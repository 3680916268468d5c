package config

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultMaxInFlight is a pool's max_in_flight when unset: enough to keep a
// sizeable cluster busy, few enough that a burst waits in etcd, not in Nomad.
const DefaultMaxInFlight = 256

// DefaultDispatchLookahead is a pool's dispatch_lookahead when unset.
const DefaultDispatchLookahead = 4

// supportedDrivers are the drivers with a jobspec in jobspecs/.
var supportedDrivers = map[string]bool{"raw_exec": true, "docker": true}

// defaults fills what the pool leaves unset. A max_in_flight,
// dispatch_lookahead or max_attempts of 0 written in the file is kept, for
// check to report; a cpu, memory or disk of 0 is taken for unset.
func (p *Pool) defaults() {
	if p.Driver == "" {
		p.Driver = "raw_exec"
	}
	if p.Driver == "raw_exec" && p.Sandbox == "" {
		p.Sandbox = "bwrap"
	}
	if len(p.Datacenters) == 0 {
		p.Datacenters = []string{"*"}
	}
	if p.NodePool == "" {
		p.NodePool = "default"
	}
	if p.CPU == 0 {
		p.CPU = 1000
	}
	if p.Memory == 0 {
		p.Memory = 1024
	}
	if p.Disk == 0 {
		p.Disk = 2048
	}
	for _, c := range p.Constraints {
		if c.Operator == "" {
			c.Operator = "="
		}
	}
	if g := p.GPU; g != nil {
		g.defaults()
	}
	if p.DefaultTimeout == "" {
		p.DefaultTimeout = "1h"
	}
	if p.MaxTimeout == "" {
		p.MaxTimeout = "6h"
	}
	if p.QueueLimit == "" {
		p.QueueLimit = "10m"
	}
	if p.StartTimeout == "" {
		p.StartTimeout = "10m"
	}
	if p.MaxInFlight == 0 && p.InFlightRange.Filename == "" {
		p.MaxInFlight = DefaultMaxInFlight
	}
	if p.DispatchLookahead == 0 && p.LookaheadRange.Filename == "" {
		p.DispatchLookahead = DefaultDispatchLookahead
	}
	if p.MaxAttempts <= 0 && p.AttemptsRange.Filename == "" {
		p.MaxAttempts = 3
	}
	if w := p.Warm; w != nil {
		w.defaults(p)
	}
}

// checkPools checks every pool, and the Nomad job IDs they make together.
func (c *Config) checkPools(ck *checker) {
	seen := map[string]bool{}
	for _, p := range c.Pools {
		if seen[p.Name] {
			ck.bad(p.DefRange, "Duplicate pool", fmt.Sprintf("pool %q is defined twice.", p.Name))
		}
		seen[p.Name] = true
		p.check(ck)
		if p.Warm != nil {
			p.Warm.check(p, ck)
			c.checkWarmTransport(p, ck)
		}
	}
	// A warm pool's service job is mediajobs-<pool>-warm: the parameterized job of
	// a pool named "<pool>-warm" would have the same Nomad ID.
	for _, p := range c.Pools {
		if p.Warm != nil {
			if q := c.Pool(p.Name + "-warm"); q != nil {
				ck.bad(q.DefRange, "Conflicting pool name", fmt.Sprintf("pool %q: its Nomad job would be mediajobs-%s, the ID of pool %q's warm runners; rename the pool.", q.Name, q.Name, p.Name))
			}
		}
	}
}

// check reports what is wrong with pool p (its warm block aside) and parses its
// durations.
func (p *Pool) check(ck *checker) {
	if p.DispatchLookahead <= 0 {
		ck.bad(p.LookaheadRange, "Invalid dispatch_lookahead", fmt.Sprintf("pool %q: dispatch_lookahead = %d; use a positive number (default %d).", p.Name, p.DispatchLookahead, DefaultDispatchLookahead))
	}
	if !supportedDrivers[p.Driver] {
		ck.bad(p.DriverRange, "Unsupported driver", fmt.Sprintf("pool %q: driver %q has no jobspec; supported: docker, raw_exec.", p.Name, p.Driver))
	}
	if p.Driver == "docker" && p.Image == "" {
		ck.bad(p.DefRange, "Missing image", fmt.Sprintf("pool %q uses the docker driver and needs an image (the worker image, e.g. \"mediajobs-worker:local\").", p.Name))
	}
	switch {
	case p.Driver == "raw_exec" && p.Sandbox != "bwrap" && p.Sandbox != "none":
		ck.bad(p.SandboxRange, "Invalid sandbox", fmt.Sprintf("pool %q: sandbox = %q; use \"bwrap\" (bubblewrap, the default) or \"none\" (no sandbox: only for trusted commands).", p.Name, p.Sandbox))
	case p.Driver == "docker" && p.Sandbox != "":
		ck.bad(p.SandboxRange, "Invalid sandbox", fmt.Sprintf("pool %q: sandbox applies to raw_exec pools; a docker pool's ffmpeg runs in its container (no network, unprivileged user, read-only root). Remove the setting.", p.Name))
	}
	if p.Disk < 50 {
		ck.bad(p.DiskRange, "Invalid disk", fmt.Sprintf("pool %q: disk = %d MB is too small; jobs keep inputs and outputs there (at least 50).", p.Name, p.Disk))
	}
	for _, c := range p.Constraints {
		c.check(p, ck)
	}
	if g := p.GPU; g != nil {
		g.check(p, ck)
	}
	if p.CPU < 100 {
		ck.bad(p.CPURange, "Invalid cpu", fmt.Sprintf("pool %q: cpu = %d MHz is below Nomad's minimum of 100.", p.Name, p.CPU))
	}
	if p.MaxInFlight < -1 || p.MaxInFlight == 0 {
		rng := p.InFlightRange
		if rng.Filename == "" {
			rng = p.DefRange
		}
		ck.bad(rng, "Invalid max_in_flight", fmt.Sprintf("pool %q: max_in_flight = %d; use a positive number, or -1 for no cap (default %d).", p.Name, min(p.MaxInFlight, 0), DefaultMaxInFlight))
	}
	if p.MaxAttempts <= 0 {
		ck.bad(p.AttemptsRange, "Invalid max_attempts", fmt.Sprintf("pool %q: max_attempts = %d must be at least 1 (default 3): the first attempt counts.", p.Name, p.MaxAttempts))
	}
	if p.Memory < 64 {
		ck.bad(p.MemoryRange, "Invalid memory", fmt.Sprintf("pool %q: memory = %d MiB is too small for ffmpeg; use at least 64.", p.Name, p.Memory))
	}
	ck.durs(
		durSetting{&p.DefaultTimeoutD, p.DefaultTimeout, p.DefaultTORange, "default_timeout"},
		durSetting{&p.MaxTimeoutD, p.MaxTimeout, p.MaxTORange, "max_timeout"},
		durSetting{&p.QueueLimitD, p.QueueLimit, p.QueueLimRange, "queue_limit"},
		durSetting{&p.StartTimeoutD, p.StartTimeout, p.StartTORange, "start_timeout"},
	)
	if p.DefaultTimeoutD > p.MaxTimeoutD && p.MaxTimeoutD > 0 {
		ck.bad(p.DefaultTORange, "Invalid default_timeout", fmt.Sprintf("pool %q: default_timeout %s is above max_timeout %s.", p.Name, p.DefaultTimeout, p.MaxTimeout))
	}
}

// check reports what is wrong with a constraint of pool p.
func (c *Constraint) check(p *Pool, ck *checker) {
	switch c.Operator {
	case "=", "!=", ">", ">=", "<", "<=", "regexp", "set_contains", "set_contains_any", "version", "semver", "is_set", "is_not_set", "distinct_hosts", "distinct_property":
	default:
		ck.bad(c.DefRange, "Invalid constraint", fmt.Sprintf("pool %q: constraint operator %q is not one of Nomad's (=, !=, <, <=, >, >=, regexp, set_contains, version, is_set, ...).", p.Name, c.Operator))
	}
	if _, err := regexp.Compile(c.Value); c.Operator == "regexp" && err != nil && !strings.Contains(c.Value, "${") {
		ck.bad(c.ValueRange, "Invalid constraint", fmt.Sprintf("pool %q: constraint value %q is not a regular expression: %v.", p.Name, c.Value, err))
	}
}
