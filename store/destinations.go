package store

import (
	"context"
	"encoding/json"
	"fmt"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// destinationsKey holds a job's output_destinations: presigned URLs, so
// credentials, kept out of the job record (which lists and views read, and
// which goes whole into events), deleted when the job ends (derivedOps: only an
// open attempt's upload links read them). Their bytes count against the
// account's max_job_bytes with the record (besideBytes) until the retention
// deletes the job.
func (s *Store) destinationsKey(id string) string { return s.p + "destinations/" + id }

// destinationsOps writes j's destinations in its create transaction.
func (s *Store) destinationsOps(j *mj.Job) ([]clientv3.Op, error) {
	if j.Destinations == nil {
		return nil, nil
	}
	b, err := json.Marshal(j.Destinations)
	if err != nil {
		return nil, err
	}
	return []clientv3.Op{clientv3.OpPut(s.destinationsKey(j.ID), string(b))}, nil
}

// Destinations returns the job's output_destinations, nil when it has none.
func (s *Store) Destinations(ctx context.Context, id string) (*mj.Destinations, error) {
	resp, err := s.cli.Get(ctx, s.destinationsKey(id))
	if err != nil {
		return nil, fmt.Errorf("read the job's destinations: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var d mj.Destinations
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		return nil, fmt.Errorf("decode the job's destinations: %w", err)
	}
	return &d, nil
}
