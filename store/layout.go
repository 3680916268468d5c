package store

// The map of the etcd keyspace: every key family the store writes, under the
// store's prefix (etcd.prefix, "/mediajobs/" by default). Each family's key and
// value helpers live in the file named on its first line; docs/architecture.md
// tells the rooms, docs/state_machine.md which job keys exist in each state.
//
// Writers:
//
//	G  a gateway (an API or dashboard request)
//	R  a runner, through a gateway's endpoint (progress, warm polls and reports)
//	L  the leading dispatcher, through its term's store (Term.Store, guard.go):
//	   its job writes, retention, sweeps, outbox deletes and event index are
//	   conditioned on its election key (commit, batch), so a deposed leader
//	   makes none of them; the storage ledger's writes (storagequota.go) are
//	   idempotent by their own compares instead
//	J  the janitor, a loop of the leader (dispatcher/janitor.go, storagequota.go,
//	   usage.go)
//	A  the operator's CLI (mediajobs accounts, keys), straight to etcd
//
// Each entry: KEY = VALUE, [file]; then who writes it, and how long it lives.
//
// Jobs. The job key and what derives from it: derivedOps (store.go) rewrites
// the derived keys in the same transaction as every job write, so they never
// disagree with the job.
//
//	jobs/<id> = mj.Job (JSON)                                        [store.go]
//	    G creates it and cancels; L makes every other change. J deletes it
//	    with its keys job_retention after it ended (DeleteFinishedJobs), never
//	    while its webhook is pending.
//	idx/<account>/<MaxInt64-created_at ns>-<id> = id                 [store.go]
//	    G at create: an account's jobs newest first (ListJobs). With the job.
//	sidx/<account>/<status>/<MaxInt64-created_at ns>-<id> = id       [store.go]
//	    Derived: the job's current status only (?status= lists; the count of
//	    sidx/<account>/queued/ checks max_queued_jobs, limits.go). With the job.
//	queue/<pool>/<account>/<queued_at ns>_<id> = id                  [store.go]
//	    Derived: unfinished with no child (new, or an attempt to dispatch
//	    again). Followed as Family Queue (follow.go), counted by QueueIndex
//	    (queueindex.go), read by fair share (fairshare.go). Versions before
//	    fair share wrote queue/<pool>/<queued_at ns>_<id>: MigrateQueueKeys
//	    moves them.
//	active/<pool>/<account>/<id> = child: a Nomad job id, or warm:<run> [store.go]
//	    Derived: unfinished with a child. Followed as Family Active (the
//	    cancel loop); with queue/, it wakes the dispatch loop (Notify). Older
//	    versions' active/<pool>/<id> goes with the job's next change of child.
//	outbox/<id> = the terminal status                                [store.go]
//	    Derived: put by the terminal write of a job with a webhook_url (next,
//	    store.go, arms Job.Webhook as pending in that write); deleted by the
//	    write that records the delivery's outcome, or by L's DeleteOutbox for
//	    a stale entry.
//	    Followed as Family Outbox by dispatcher/outbox.go.
//	done/<finished_at ns>_<id> = id                              [retention.go]
//	    Derived: put by the terminal write. J reads the expired ones in time
//	    order and deletes them with their jobs.
//	awaits/<dep>/<id> = ""                                          [awaits.go]
//	    Derived: job id is unfinished and awaits an output of job dep (an
//	    input job:<dep>/<output>); it has no queue key until it awaits
//	    nothing. Followed as Family Awaits by dispatcher/awaits.go, which
//	    releases or fails it when dep ends.
//	progress/<id> = ProgressRecord (JSON)                         [progress.go]
//	    R via G (PutProgress), only while the job is as the gateway read it.
//	    Leased (about a minute, progressTTL); derived: deleted when the job or
//	    its attempt ends.
//	destinations/<id> = mj.Destinations (JSON: presigned URLs) [destinations.go]
//	    G at create, beside the record; derived: deleted by the terminal write.
//	tally/<id> = ""                                           [storagequota.go]
//	    Derived: put by a succeeded job's terminal write when its outputs stay
//	    in the service's storage (tallied). L deletes it as it counts them
//	    (CountOutputs); J counts what a stopped leader left.
//	idem/<account>/<sha256(Idempotency-Key)> = idemRecord (JSON)     [store.go]
//	    G at create, in its transaction. J after 24 h (SweepIdempotency), or
//	    with the job it created.
//
// Pipelines (docs/pipelines.md): a record, then its jobs (ordinary jobs/<id>
// records with their own keys above), stored after it in batches.
//
//	pipelines/<id> = mj.Pipeline (JSON)                          [pipelines.go]
//	    G creates it with its plan (every job, ids assigned) and sets its stop
//	    (cancel); G or L stores the planned jobs and drops the plan; L records
//	    its end, its stop under fail_fast, and its webhook's delivery.
//	pidx/<account>/<MaxInt64-created_at ns>-<id> = id            [pipelines.go]
//	    G at create: an account's pipelines newest first (ListPipelines).
//	pmat/<id> = created_at (unix ns)                             [pipelines.go]
//	    Derived: the record still holds a plan. L stores the jobs of one that
//	    a gateway left (dispatcher/pipelines.go).
//	pqueued/<account>/<id> = jobs planned not stored (zero-padded) [pipelines.go]
//	    Derived, with pmat/: G puts it at create, with the plan's length; each
//	    batch storing jobs (G or L) lowers it (compared, only ever down), the
//	    write that drops the plan deletes it. Counted as queued against
//	    max_queued_jobs (limits.go).
//	prun/<id> = ""                                               [pipelines.go]
//	    Derived: the pipeline has not ended. L looks at each again (resync).
//	pdone/<finished_at ns>_<id> = id                             [pipelines.go]
//	    Derived: put by the write that ends it. J deletes the pipeline with
//	    its keys job_retention after (DeleteEndedPipelines), never while its
//	    webhook is pending.
//	poutbox/<id> = the terminal status                           [pipelines.go]
//	    Derived: put by the write that ends a pipeline with a webhook_url,
//	    deleted by the write that records the delivery's outcome.
//	pfollow/<id> = ""                                            [pipelines.go]
//	    Derived: put by the write that ends a chunked pipeline; L deletes it
//	    once the pipeline's owner (the user's job) ended as it (or is gone),
//	    and ends the owner of each it lists (dispatcher/chunked.go), so that
//	    a leader dying between the two writes leaves the owner to the next.
//	idem/<account>/<sha256("pipeline\x00" + Idempotency-Key)> = idemRecord [pipelines.go]
//	    G, with the pipeline's record (its idem_hash names it); J after 24 h,
//	    or with the pipeline (DeleteEndedPipelines).
//
// Accounting: what each account holds and used (docs/limits.md, docs/usage.md).
// An amount held is a counter that grows, sharded so concurrent writers rarely
// compare on the same key, less one that only the janitor adds to (…_freed),
// so the two kinds of writer never contend.
//
//	usage/<account>/job_bytes/<shard 0-15> = bytes (decimal)         [limits.go]
//	    G: each create adds its record's bytes; a pipeline's create near
//	    max_queued_jobs rewrites every shard as read (store/pipelines.go).
//	    Never deleted.
//	usage/<account>/job_bytes_freed = bytes (decimal)                [limits.go]
//	    J: the retention adds what the jobs it deletes counted. Never deleted.
//	usage/<account>/storage/<shard 0-15> = bytes (decimal)    [storagequota.go]
//	    G (temporary files), L and J (a succeeded job's outputs; J also an
//	    undeclared temporary file), with the held/ record. Never deleted.
//	usage/<account>/storage_freed = bytes (decimal)           [storagequota.go]
//	    J: ReleaseExpired adds what it gives back. Never deleted.
//	held/<account>/<object: tmp/<id> | job/<job id>> = Held (JSON) [storagequota.go]
//	    G, L, J (an undeclared temporary file's first count): one per counted
//	    object. J deletes it at its expiry (tmp_file_ttl; output_retention).
//	heldexp/<expires stamp>/<account>/<object> = Held (JSON)  [storagequota.go]
//	    The held/ record under its expiry, written and deleted with it.
//	meter/<account>/<YYYY-MM-DD>/<pool>/<shard 0-3> = meterRecord (JSON) [usage.go]
//	    The write that ends a job with its usage adds to it in the same
//	    transaction (withMeter, commitMetered): L, or G for a cancel. J deletes
//	    days older than usage.retention_days (SweepUsage).
//	streams/<account>/<uuid> = ""                              [streamquota.go]
//	    G while an event stream is open, under the gateway's lease (streamTTL):
//	    a dead gateway's streams lapse with it.
//	sched/<account> = Schedule (JSON: weight, running cap, limit overrides) [fairshare.go]
//	    A (mediajobs accounts limits). Until reset.
//
// Accounts, API keys, dashboard sign-in.
//
//	accounts/<id> = mj.Account (JSON, with its webhook signing secret) [keys.go]
//	    A creates it; G sets its webhook secret. Never deleted.
//	account_names/<name> = account id                                  [keys.go]
//	    A, with the account: names are unique. Never deleted.
//	keys/<sha256(secret)> = mj.APIKey (JSON)                           [keys.go]
//	    A or G creates it; G records its last use. Until revoked (gateways
//	    watch the deletes).
//	account_keys/<account>/<key id> = key hash                         [keys.go]
//	    With the key.
//	account_keys_version/<account> = the last revoked key's id         [keys.go]
//	    Every revocation (A, G) rewrites it: two at once cannot remove the
//	    last two keys. Never deleted.
//	links_ended/<account> = the key id whose revocation shut it out [sessions.go]
//	    A (keys revoke -force of the account's last key: revokeAPIKey,
//	    keys.go). Never deleted: LinksEnded compares its revision.
//	sessions/<sha256(cookie)> = Session (JSON)                     [sessions.go]
//	    G at sign-in, leased for session_ttl; its lease is revoked at
//	    sign-out, and when the key that signed it in is revoked.
//	session_index/<key hash | login-link.<account>>/<sha256(cookie)> = lease id [sessions.go]
//	    G, with the session, under its lease: the sessions a key ends.
//	login_tokens/<sha256(token)> = LoginToken (JSON)               [sessions.go]
//	    A (mediajobs accounts login-link), leased for the link's ttl; G
//	    deletes it at its one use.
//
// Warm runners (docs/warm.md), under a runner's poll lease (the pool's warm
// lease_ttl, granted and kept by a gateway: warmlease.go).
//
//	warm/idle/<pool>/<alloc> = WarmIdle (JSON)                        [warm.go]
//	    R via G while it waits for a job, under the lease; goes with the
//	    hand-out (L) or the end of the wait (G).
//	warm/run/<pool>/<alloc> = WarmRun (JSON)                          [warm.go]
//	    L hands a job out (OfferWarm, in the job's transaction) under the same
//	    lease, which R renews via G; G marks it started and deletes it at the
//	    report. A run key that lapses without a done key sends the job back
//	    to the queue, or settles it from its result (dispatcher/warm.go).
//	warm/done/<run> = WarmDone (JSON)                                 [warm.go]
//	    R via G, in the run key's delete (FinishWarmRun). L deletes it once
//	    applied.
//
// The dispatcher and the store's own markers.
//
//	dispatcher/leader/<lease id> = the dispatcher's name             [guard.go]
//	    Each dispatcher's campaign (an etcd election) under its session's
//	    lease (leader_ttl); the oldest key leads. Its create revision fences
//	    the term's writes.
//	dispatcher/event_index = Nomad event index (decimal)             [store.go]
//	    L after applying each batch of Nomad events. Never deleted.
//	migrations/done_index = RFC 3339 time                        [retention.go]
//	    J once BackfillDone gave every finished job its done/ key.
//	migrations/heldexp = RFC 3339 time                        [storagequota.go]
//	    J: when the last scan of held/ for records without heldexp/ ended.
//	migrations/heldexp_scan = heldScan (JSON)                 [storagequota.go]
//	    J: that scan's cursor, until a scan finds no writer before the index.
//	ping                                                             [store.go]
//	    Never written: Ping reads it (count only) to see etcd answer.
//
// Blob object names (tmp/, jobs/<id>/<attempt>/, ...) are the blob store's,
// not etcd's; held/ names the objects it counts with TmpObject and
// OutputsObject.

// QueuePrefix, ActivePrefix and OutboxPrefix are watched by the dispatcher.
func (s *Store) QueuePrefix() string  { return s.p + "queue/" }
func (s *Store) ActivePrefix() string { return s.p + "active/" }
func (s *Store) OutboxPrefix() string { return s.p + "outbox/" }

// ElectionPrefix is where dispatchers campaign for leadership.
func (s *Store) ElectionPrefix() string { return s.p + "dispatcher/leader" }
