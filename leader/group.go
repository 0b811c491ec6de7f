package leader

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
	"k8s.io/utils/clock"

	"github.com/quietpatch/quietpatch/statuspatch/outcome"
)

// Group is one replica's view of a sharded pipeline: the replicas alive and
// who holds each of its shards. It keeps a membership Lease of its own
// (named [Group.MemberLease], renewed like a claim and deleted when Run
// stops, so the others count one replica fewer at once), and lists the
// namespace's Leases every RetryPeriod.
//
// A replica is alive, and a shard held, by the rule of [Claimer]: the
// Lease names a holder and changed less than its leaseDurationSeconds ago
// on this replica's clock (observed time, so clock skew between replicas
// does not matter). [Plan] turns a [View] into what to take and give up.
// Group writes only its own membership Lease; the shard Leases are each
// shard's [Claimer]'s.
type Group struct {
	leases coordinationv1client.LeaseInterface
	cfg    Config
	shards int
	clk    clock.Clock
	log    *slog.Logger

	mu      sync.Mutex
	seen    map[string]observed // by Lease name
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

// View is a snapshot of a [Group]: Members are the identities alive,
// sorted; Holders[i] is the holder of shard i's current claim, "" when the
// shard is free (no holder, or its claim ran out).
type View struct {
	Members []string
	Holders []string
}

// NewGroup returns the Group of shards shards named cfg.Name in
// cfg.Namespace, for the replica cfg.Identity. Of cfg it uses Namespace,
// Name, Identity, LeaseDuration, RenewGrace, RetryPeriod, CallTimeout, Clock
// and Logger, with Claimer's defaults and rules.
func NewGroup(client coordinationv1client.LeasesGetter, cfg Config, shards int) (*Group, error) {
	if client == nil {
		return nil, &outcome.ConfigError{Field: "Leases", Reason: "must not be nil"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if shards < 1 {
		return nil, &outcome.ConfigError{Field: "Shards", Reason: fmt.Sprintf("must be >= 1, got %d", shards)}
	}
	g := &Group{
		leases: client.Leases(cfg.Namespace), cfg: cfg, shards: shards, clk: cfg.Clock,
		log: cfg.Logger, seen: map[string]observed{}, holders: make([]string, shards),
		changed: make(chan struct{}, 1),
	}
	for i := range shards {
		if name := g.ShardLease(i); len(name) > 253 {
			return nil, &outcome.ConfigError{Field: "Name", Reason: fmt.Sprintf("is too long for the shard Lease names (%q)", name)}
		}
	}
	return g, nil
}

// ShardLease is the name of shard i's Lease: <Name>-shard-<i>-of-<K>. The
// count is part of the name, so that deployments with different K never
// share a Lease for different ranges.
func (g *Group) ShardLease(i int) string {
	return fmt.Sprintf("%s-shard-%d-of-%d", g.cfg.Name, i, g.shards)
}

// MemberLease is the name of this replica's membership Lease:
// <Name>-member-<FNV-1a of the identity, 8 hex digits>.
func (g *Group) MemberLease() string { return memberLease(g.cfg.Name, g.cfg.Identity) }

func memberLease(name, id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%s-member-%08x", name, h.Sum32())
}

// Identity is this replica's identity.
func (g *Group) Identity() string { return g.cfg.Identity }

// View returns the latest view; this replica is always among the Members.
func (g *Group) View() View {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshLocked(g.clk.Now())
	v := View{Members: slices.Clone(g.members), Holders: slices.Clone(g.holders)}
	if !slices.Contains(v.Members, g.cfg.Identity) {
		v.Members = append(v.Members, g.cfg.Identity)
		slices.Sort(v.Members)
	}
	return v
}

// Seen says when the Group first saw the Lease name at resourceVersion
// rv, if it did and that is still its latest list: [Config].Seen of the
// shards' claimers.
func (g *Group) Seen(name, rv string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o, ok := g.seen[name]
	if !ok || o.rv != rv {
		return time.Time{}, false
	}
	return o.at, true
}

// Lists returns how many lists of the Leases have succeeded. A replica
// that plans only after two has seen every replica that started within a
// RetryPeriod of it (each creates its membership Lease before its first
// list), so replicas started together do not all take every shard first.
func (g *Group) Lists() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lists
}

// Changed receives a value after a list changed the view.
func (g *Group) Changed() <-chan struct{} { return g.changed }

// Healthy returns the last failure to list the Leases or renew the
// membership Lease, nil once a later attempt succeeded.
func (g *Group) Healthy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Run renews the membership Lease and lists the Leases until ctx is
// cancelled, then deletes the membership Lease (a fresh CallTimeout) and
// returns nil. Failures are retried every RetryPeriod; Run returns early
// only for an error retrying cannot fix (Forbidden, Unauthorized, Invalid).
func (g *Group) Run(ctx context.Context) error {
	g.log.Info("leader: joining the shard group", slog.String("group", g.cfg.Name),
		slog.String("member", g.MemberLease()), slog.Int("shards", g.shards))
	defer g.leave()
	var renewed time.Time
	period := g.cfg.LeaseDuration - g.cfg.RenewGrace
	for {
		now := g.clk.Now()
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
			if fatal(err) {
				return fmt.Errorf("leader: shard group %s: %w", g.cfg.Name, err)
			}
			g.log.Debug("leader: shard group request failed; retrying", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-g.clk.After(g.cfg.RetryPeriod):
		}
	}
}

func (g *Group) renew(ctx context.Context, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	name := g.MemberLease()
	spec := coordv1.LeaseSpec{
		HolderIdentity:       ptr(g.cfg.Identity),
		LeaseDurationSeconds: ptr(int32(g.cfg.LeaseDuration / time.Second)),
		RenewTime:            &metav1.MicroTime{Time: now},
	}
	lease, err := g.leases.Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		spec.AcquireTime = spec.RenewTime
		_, err = g.leases.Create(cctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.cfg.Namespace}, Spec: spec}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if lease.Spec.AcquireTime == nil || holderOf(lease) != g.cfg.Identity {
		spec.AcquireTime = spec.RenewTime
	} else {
		spec.AcquireTime = lease.Spec.AcquireTime
	}
	lease.Spec = spec
	_, err = g.leases.Update(cctx, lease, metav1.UpdateOptions{})
	return err
}

func (g *Group) list(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	list, err := g.leases.List(cctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	now := g.clk.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	before := View{Members: slices.Clone(g.members), Holders: slices.Clone(g.holders)} // refreshLocked reuses both
	next := make(map[string]observed, len(g.seen))
	for i := range list.Items {
		l := &list.Items[i]
		if !strings.HasPrefix(l.Name, g.cfg.Name+"-") {
			continue
		}
		o, ok := g.seen[l.Name]
		if !ok || o.rv != l.ResourceVersion {
			o = observed{rv: l.ResourceVersion, at: now}
		}
		o.holder, o.dur = holderOf(l), durationOf(l)
		next[l.Name] = o
	}
	g.seen = next
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
func (g *Group) refreshLocked(now time.Time) {
	alive := func(o observed) bool { return o.holder != "" && now.Before(o.at.Add(o.dur)) }
	g.members = g.members[:0]
	prefix := g.cfg.Name + "-member-"
	for name, o := range g.seen {
		if strings.HasPrefix(name, prefix) && alive(o) && name == memberLease(g.cfg.Name, o.holder) {
			g.members = append(g.members, o.holder)
		}
	}
	slices.Sort(g.members)
	g.members = slices.Compact(g.members)
	for i := range g.holders {
		g.holders[i] = ""
		if o, ok := g.seen[g.ShardLease(i)]; ok && alive(o) {
			g.holders[i] = o.holder
		}
	}
}

// leave deletes the membership Lease, if it still names us.
func (g *Group) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.CallTimeout)
	defer cancel()
	name := g.MemberLease()
	lease, err := g.leases.Get(ctx, name, metav1.GetOptions{})
	if err == nil && holderOf(lease) == g.cfg.Identity {
		err = g.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &lease.ResourceVersion}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		g.log.Info("leader: could not delete the membership Lease; it runs out", slog.String("lease", name), slog.Any("err", err))
		return
	}
	g.log.Info("leader: left the shard group", slog.String("group", g.cfg.Name), slog.String("member", name))
}
