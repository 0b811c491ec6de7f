package shard

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/quietpatch/quietpatch/internal/base"
	"github.com/quietpatch/quietpatch/internal/leases"
	"github.com/quietpatch/quietpatch/leader"
)

// group is one replica's membership of a shard group: the replicas alive
// and who holds each shard. It keeps a membership Lease of its own (named
// by memberLease, renewed like a claim and deleted when run stops, so the
// others count one replica fewer at once), and lists the namespace's
// Leases every RetryPeriod.
//
// A replica is alive, and a shard held, by the rule of leader.Claimer: the
// Lease names a holder and changed less than its leaseDurationSeconds ago
// on this replica's clock (observed time, so clock skew between replicas
// does not matter). [Plan] turns its [View] into what to take and give up.
// It writes only its own membership Lease; the shard Leases are each
// shard's claimer's.
type group struct {
	leases coordinationv1client.LeaseInterface
	client coordinationv1client.LeasesGetter // for leases.Warn at run
	cfg    leader.Config                     // of it: Namespace, Name, Identity, the durations, Clock, Logger
	shards int

	mu      sync.Mutex
	known   map[string]observed // by Lease name
	members []string
	holders []string
	lists   int   // successful lists
	err     error // last list or renewal failure, nil once one succeeds
	changed chan struct{}
}

type observed struct {
	rv     string
	holder string
	at     time.Time // when rv was first seen
	dur    time.Duration
}

// newGroup returns the group of shards shards named cfg.Name in
// cfg.Namespace, for the replica cfg.Identity. cfg has leader's defaults
// applied (leader.Config.Complete).
func newGroup(client coordinationv1client.LeasesGetter, cfg leader.Config, shards int) (*group, error) {
	if err := leases.Check(client); err != nil {
		return nil, err
	}
	g := &group{client: client, leases: client.Leases(cfg.Namespace), cfg: cfg, shards: shards,
		known: map[string]observed{}, holders: make([]string, shards), changed: make(chan struct{}, 1)}
	for i := range shards {
		if name := g.shardLease(i); len(name) > 253 {
			return nil, &base.ConfigError{Field: "Lease.Name", Reason: fmt.Sprintf("is too long for the shard Lease names (%q)", name)}
		}
	}
	return g, nil
}

// shardLease is the name of shard i's Lease: <Name>-shard-<i>-of-<K>. The
// count is part of the name, so that deployments with different K never
// share a Lease for different ranges.
func (g *group) shardLease(i int) string { return LeaseName(g.cfg.Name, i, g.shards) }

// LeaseName is the name of shard i's Lease of k, for the Lease name:
// <name>-shard-<i>-of-<k>.
func LeaseName(name string, i, k int) string { return fmt.Sprintf("%s-shard-%d-of-%d", name, i, k) }

// memberLease is the name of the membership Lease of the replica id:
// <name>-member-<FNV-1a of id, 8 hex digits>.
func memberLease(name, id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%s-member-%08x", name, h.Sum32())
}

// view returns the latest view; this replica is always among the Members.
func (g *group) view() View {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshLocked(g.cfg.Clock.Now())
	v := View{Members: slices.Clone(g.members), Holders: slices.Clone(g.holders)}
	if !slices.Contains(v.Members, g.cfg.Identity) {
		v.Members = append(v.Members, g.cfg.Identity)
		slices.Sort(v.Members)
	}
	return v
}

// seen says when the group first saw the Lease name at resourceVersion
// rv, if it did and that is still its latest list: what the shards'
// claimers learn through leases.Checked.
func (g *group) seen(name, rv string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o, ok := g.known[name]
	if !ok || o.rv != rv {
		return time.Time{}, false
	}
	return o.at, true
}

// listed returns how many lists of the Leases have succeeded. A replica
// that plans only after two has seen every replica that started within a
// RetryPeriod of it (each creates its membership Lease before its first
// list), so replicas started together do not all take every shard first.
func (g *group) listed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lists
}

// healthy returns the last failure to list the Leases or renew the
// membership Lease, nil once a later attempt succeeded.
func (g *group) healthy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// run renews the membership Lease and lists the Leases until ctx is
// cancelled, then deletes the membership Lease (a fresh CallTimeout) and
// returns nil. Failures are retried every RetryPeriod; run returns early
// only for an error retrying cannot fix (Forbidden, Unauthorized, Invalid).
func (g *group) run(ctx context.Context) error {
	g.cfg.Logger.Info("leader: joining the shard group", slog.String("group", g.cfg.Name),
		slog.String("member", memberLease(g.cfg.Name, g.cfg.Identity)), slog.Int("shards", g.shards))
	defer g.leave()
	leases.Warn(g.cfg.Logger, g.client)
	var renewed time.Time
	period := g.cfg.LeaseDuration - g.cfg.RenewGrace
	for {
		now := g.cfg.Clock.Now()
		var err error
		if renewed.IsZero() || now.Sub(renewed) >= period {
			if err = g.renew(ctx, now); err == nil {
				renewed = now
			}
		}
		if lerr := g.list(ctx); err == nil {
			err = lerr
		}
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			if base.Permanent(err) {
				return fmt.Errorf("leader: shard group %s: %w", g.cfg.Name, err)
			}
			g.cfg.Logger.Debug("leader: shard group request failed; retrying", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-g.cfg.Clock.After(g.cfg.RetryPeriod):
		}
	}
}

func (g *group) renew(ctx context.Context, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	name := memberLease(g.cfg.Name, g.cfg.Identity)
	spec := coordv1.LeaseSpec{
		HolderIdentity:       new(g.cfg.Identity),
		LeaseDurationSeconds: new(int32(g.cfg.LeaseDuration / time.Second)),
		AcquireTime:          &metav1.MicroTime{Time: now},
		RenewTime:            &metav1.MicroTime{Time: now},
	}
	lease, err := g.leases.Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = g.leases.Create(cctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.cfg.Namespace}, Spec: spec}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if lease.Spec.AcquireTime != nil && leases.Holder(lease) == g.cfg.Identity {
		spec.AcquireTime = lease.Spec.AcquireTime // ours already: since we joined
	}
	lease.Spec = spec
	_, err = g.leases.Update(cctx, lease, metav1.UpdateOptions{})
	return err
}

func (g *group) list(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	list, err := g.leases.List(cctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	now := g.cfg.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	before := View{Members: slices.Clone(g.members), Holders: slices.Clone(g.holders)} // refreshLocked reuses both
	next := make(map[string]observed, len(g.known))
	for i := range list.Items {
		l := &list.Items[i]
		if !strings.HasPrefix(l.Name, g.cfg.Name+"-") {
			continue
		}
		o, ok := g.known[l.Name]
		if !ok || o.rv != l.ResourceVersion {
			o = observed{rv: l.ResourceVersion, at: now}
		}
		o.holder, o.dur = leases.Holder(l), leases.Duration(l)
		next[l.Name] = o
	}
	g.known = next
	g.lists++
	g.refreshLocked(now)
	if !slices.Equal(before.Members, g.members) || !slices.Equal(before.Holders, g.holders) {
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
	return nil
}

// refreshLocked recomputes members and holders from seen at now.
func (g *group) refreshLocked(now time.Time) {
	alive := func(o observed) bool { return o.holder != "" && now.Before(o.at.Add(o.dur)) }
	g.members = g.members[:0]
	prefix := g.cfg.Name + "-member-"
	for name, o := range g.known {
		if strings.HasPrefix(name, prefix) && alive(o) && name == memberLease(g.cfg.Name, o.holder) {
			g.members = append(g.members, o.holder)
		}
	}
	slices.Sort(g.members)
	g.members = slices.Compact(g.members)
	for i := range g.holders {
		g.holders[i] = ""
		if o, ok := g.known[g.shardLease(i)]; ok && alive(o) {
			g.holders[i] = o.holder
		}
	}
}

// leave deletes the membership Lease, if it still names us.
func (g *group) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.CallTimeout)
	defer cancel()
	name := memberLease(g.cfg.Name, g.cfg.Identity)
	lease, err := g.leases.Get(ctx, name, metav1.GetOptions{})
	if err == nil && leases.Holder(lease) == g.cfg.Identity {
		err = g.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &lease.ResourceVersion}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		g.cfg.Logger.Info("leader: could not delete the membership Lease; it runs out", slog.String("lease", name), slog.Any("err", err))
		return
	}
	g.cfg.Logger.Info("leader: left the shard group", slog.String("group", g.cfg.Name), slog.String("member", name))
}
