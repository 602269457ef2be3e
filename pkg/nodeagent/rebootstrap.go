package nodeagent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/carousel-dev/carousel/pkg/fsync"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// A re-bootstrap recovers, in ModeKubelet, a kubelet whose credentials the
// API server refuses: a node that was off through a whole CA rotation comes
// back with a client certificate from a client CA the API server no longer
// trusts (401) and a kubeconfig that does not trust the API server's new
// certificate, and the kubelet, which judges its kubeconfig by its expiry
// alone, never bootstraps again by itself (see
// docs/explanation/kubelet-credentials.md). Once whoever provisions the
// machine has delivered a fresh bootstrap kubeconfig, the agent moves the
// kubelet's refused client pair and kubeconfig aside, restarts the kubelet so
// that it bootstraps with the bootstrap kubeconfig, waits for it, and then,
// with the new credentials, brings the kubelet in line with the node trust
// bundles (renewal.resyncSteps).
//
// Both must go. A kubelet with rotateCertificates (what the agent requires)
// that finds its kubeconfig missing writes a new one pointing at its cert dir
// (k8s.io/kubernetes pkg/kubelet/certificate/bootstrap, LoadClientConfig), and
// its certificate manager then keeps using kubelet-client-current.pem for as
// long as that has not expired, the bootstrap credentials only when there is
// none (cmd/kubelet/app/server.go, buildClientCertificateManager): with the
// refused pair in place it would go on being refused.
//
// The serving certificate is left in place until then: before the kubelet
// has bootstrapped the agent cannot read the kubelet bundle, so it cannot
// tell whether the certificate is trusted, and a kubelet started without one
// serves nothing until a CSR of its own is approved, which with manual
// approval waits for an administrator. It is renewed with the new
// credentials only when it does not verify against the kubelet bundle.

const (
	// rebootstrapRecord names the progress record of a re-bootstrap.
	rebootstrapRecord = "re-bootstrap"
	// rebootstrapLabel starts the log lines of a re-bootstrap.
	rebootstrapLabel = "kubelet re-bootstrap"
	// refusedSuffix is added to the names of the kubelet's kubeconfig and
	// current client pair moved aside (refusedPath).
	refusedSuffix = ".refused"
	// publishedBootstrapKubeconfig is where Carousel publishes the current
	// bootstrap kubeconfig (credentials.BootstrapKubeconfigSecretName; not
	// imported, which would bring the controller packages into the agent).
	publishedBootstrapKubeconfig = "the Secret <cluster>-bootstrap-kubeconfig in the Cluster's namespace"
)

// refusedPath is where the kubelet's kubeconfig or current client pair at
// path is moved aside. It is kept, for an administrator to look at; an older
// one there is replaced.
func refusedPath(path string) string { return path + refusedSuffix }

// kubeconfigState is how the kubelet's kubeconfig stands, as far as a
// re-bootstrap goes.
type kubeconfigState int

const (
	// kubeconfigNotRefused: it is there with its pair, and not known to be
	// refused: the API server accepts it, or could not be asked
	// (unreachable, a timeout, a 5xx), or the kubeconfig and pair do not
	// load.
	kubeconfigNotRefused kubeconfigState = iota
	// kubeconfigRefused: the API server answers 401 to its client
	// certificate, or presents a certificate its CA bundle does not verify.
	kubeconfigRefused
	// kubeconfigAbsent: there is no kubeconfig, or no current client pair:
	// the kubelet bootstraps when it starts, or is bootstrapping.
	kubeconfigAbsent
)

func (s kubeconfigState) String() string {
	return [...]string{"not refused", "refused", "absent"}[s]
}

// rebootstrapStep is a step of a re-bootstrap, in the order they run.
type rebootstrapStep int

const (
	// rebootstrapNothing: there is nothing to re-bootstrap.
	rebootstrapNothing rebootstrapStep = iota
	// rebootstrapMoveAside moves the refused client pair and kubeconfig aside.
	rebootstrapMoveAside
	// rebootstrapRestart restarts the kubelet, so that it bootstraps.
	rebootstrapRestart
	// rebootstrapAwait waits until the kubelet has bootstrapped.
	rebootstrapAwait
	// rebootstrapResync brings the kubelet in line with the node trust bundles.
	rebootstrapResync
)

func (s rebootstrapStep) String() string {
	return [...]string{"nothing", "move the refused credentials aside", "restart the kubelet to bootstrap",
		"wait for the kubelet to bootstrap", "bring the kubelet in line with the node trust bundles"}[s]
}

// needsBootstrapKubeconfig says whether the step, and the ones after it,
// depend on the bootstrap kubeconfig: the kubelet bootstraps with it when
// it restarts without a kubeconfig. The agent checks it before them, and
// does nothing of the kind while it would not work.
func (s rebootstrapStep) needsBootstrapKubeconfig() bool {
	return s == rebootstrapMoveAside || s == rebootstrapRestart
}

// planRebootstrap returns the step a re-bootstrap starts at (or resumes at,
// after a crash or a failed attempt), from how the kubelet's kubeconfig and
// pair stand and what the progress record says was done: the credentials
// moved aside, the kubelet restarted since.
//
//   - Refused credentials are moved aside; after a move the kubelet was not
//     restarted since, again (the move did not happen).
//   - Refused credentials after a move and a restart are ones the kubelet
//     bootstrapped and the API server refuses too: wait (the wait says so),
//     rather than restart the kubelet and file a CSR over and over. Once
//     the API server took them (bootstrapped), a refusal is a new one (the
//     re-bootstrap's last step failing since, a later rotation completed
//     without the node): they are moved aside again.
//   - Credentials the agent did not move aside are the kubelet's business:
//     nothing, also when there are none (it bootstraps when it starts).
//   - None (no kubeconfig, or no pair), after a move: restart the kubelet,
//     unless that was done; then wait until it has bootstrapped.
//   - One that is not refused, after a move: the kubelet has bootstrapped
//     (or the move never happened and the API server cannot be asked now):
//     bring it in line, which needs the API server anyway.
func planRebootstrap(kubeconfig kubeconfigState, movedAside, restarted, bootstrapped bool) rebootstrapStep {
	switch {
	case kubeconfig == kubeconfigRefused && movedAside && restarted && !bootstrapped:
		return rebootstrapAwait
	case kubeconfig == kubeconfigRefused:
		return rebootstrapMoveAside
	case !movedAside:
		return rebootstrapNothing
	case kubeconfig == kubeconfigAbsent && !restarted:
		return rebootstrapRestart
	case kubeconfig == kubeconfigAbsent:
		return rebootstrapAwait
	default:
		return rebootstrapResync
	}
}

// rebootstrapUnfinished says whether the progress record in certDir is that
// of a re-bootstrap that moved the kubelet's credentials aside and has not
// finished.
func rebootstrapUnfinished(certDir string) bool {
	p, err := loadProgress(certDir, rebootstrapRecord)
	return err == nil && p.CredentialsMovedAside
}

// rebootstrap is one attempt at a re-bootstrap.
type rebootstrap struct {
	n        *Node
	progress *progress
	// refusal is how the API server refused the kubelet's credentials, when
	// this attempt found them refused.
	refusal refusal
}

// rebootstrapTakesOver is WatchRenewals' turn after each attempt to watch
// the Node (w, or watchErr), in ModeKubelet: when the attempt failed, or a
// re-bootstrap is unfinished, it re-bootstraps the kubelet if the API server
// refuses its credentials (rebootstrapIfRefused). It returns whether it
// re-bootstrapped the kubelet or failed to: then it has stopped w, and the
// caller watches again. A failed attempt is counted, logged and waited out
// with retry, or with refused when a request was denied or failed (the last
// step may ask for a serving certificate), as a renewal's is.
func (n *Node) rebootstrapTakesOver(ctx context.Context, w watch.Interface, watchErr error, retry, refused *backoff) bool {
	if watchErr == nil {
		// The API server took the kubelet's credentials: a refusal seen
		// before does not count towards RefusalGrace any more.
		n.refusedSince = time.Time{}
	}
	if n.Kubelet == nil || (watchErr == nil && !rebootstrapUnfinished(n.Manager.cfg.CertDir)) {
		return false
	}
	rebootstrapped, err := n.rebootstrapIfRefused(ctx)
	if !rebootstrapped && err == nil {
		return false
	}
	if w != nil {
		w.Stop()
	}
	if err != nil {
		n.Manager.cfg.Metrics.renewError()
		n.retryAfter(ctx, afterFailure(err, retry, refused), rebootstrapLabel, err)
	} else {
		retry.reset()
		refused.reset()
	}
	return true
}

// rebootstrapIfRefused re-bootstraps the kubelet (ModeKubelet) when the API
// server refuses its credentials, and carries on a re-bootstrap that an
// earlier attempt left unfinished. It returns whether it re-bootstrapped the
// kubelet; false and no error when there is nothing to do. An API server
// that cannot be reached refuses nothing: nothing is done then.
//
// A refusal starts a re-bootstrap only once it has lasted RefusalGrace.
//
// Every step is safe to repeat: the progress record (rebootstrapRecord)
// says what was done (the move is recorded before it is made, the restart
// after), and an attempt that fails anywhere is taken up again from what the
// files and the record say (planRebootstrap).
func (n *Node) rebootstrapIfRefused(ctx context.Context) (bool, error) {
	if n.Kubelet == nil {
		return false, nil
	}
	record, err := loadProgress(n.Manager.cfg.CertDir, rebootstrapRecord)
	if err != nil {
		return false, err
	}
	rb := &rebootstrap{n: n, progress: record}
	state := rb.kubeconfigState(ctx)
	// A refusal of credentials the API server took (none moved aside, or
	// the ones the kubelet bootstrapped with) counts once it has lasted.
	refusedAfresh := !record.CredentialsMovedAside || record.Bootstrapped && state == kubeconfigRefused
	if refusedAfresh && !n.refusalLasted(state) {
		return false, nil
	}
	first := planRebootstrap(state, record.CredentialsMovedAside, record.RestartedToBootstrap, record.Bootstrapped)
	if first == rebootstrapNothing {
		return false, nil
	}
	if first.needsBootstrapKubeconfig() {
		if err := rb.checkBootstrapKubeconfig(ctx, state); err != nil {
			return false, err
		}
	}
	if first != rebootstrapMoveAside {
		n.logf("%s: resuming an unfinished re-bootstrap (the kubeconfig is %s) at: %s", rebootstrapLabel, state, first)
	}
	if err := rb.run(ctx, first); err != nil {
		return false, err
	}
	n.refusedSince = time.Time{}
	return true, nil
}

// refusalLasted records state and reports whether the kubelet's credentials
// have been refused for at least RefusalGrace, with no answer in between
// that did not refuse them.
func (n *Node) refusalLasted(state kubeconfigState) bool {
	if state != kubeconfigRefused {
		n.refusedSince = time.Time{}
		return false
	}
	now := n.Manager.cfg.Clock.Now()
	if n.refusedSince.IsZero() {
		n.refusedSince = now
	}
	if lasted := now.Sub(n.refusedSince); lasted < n.RefusalGrace {
		n.logf("%s: the kubelet's credentials are refused; re-bootstrapping once that has lasted %s (%s so far)",
			rebootstrapLabel, n.RefusalGrace, lasted.Round(time.Millisecond))
		return false
	}
	return true
}

// run carries the re-bootstrap out from step first on, and clears the
// record once the kubelet is in line.
func (rb *rebootstrap) run(ctx context.Context, first rebootstrapStep) error {
	m := rb.n.Manager
	started := m.cfg.Clock.Now()
	steps := []struct {
		step rebootstrapStep
		run  func(context.Context) error
	}{
		{rebootstrapMoveAside, rb.moveCredentialsAside},
		{rebootstrapRestart, rb.restartKubelet},
		{rebootstrapAwait, rb.awaitBootstrap},
		{rebootstrapResync, rb.resync},
	}
	for _, s := range steps {
		if s.step < first {
			continue
		}
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.step, err)
		}
	}
	if err := clearProgress(m.cfg.CertDir); err != nil {
		return err
	}
	m.cfg.Metrics.kubeletRebootstrapped()
	rb.n.logf("%s: done in %s: the kubelet bootstrapped again with %s, client certificate valid until %s", rebootstrapLabel,
		m.cfg.Clock.Since(started).Round(time.Millisecond), m.cfg.BootstrapKubeconfigPath, m.Current().Cert.NotAfter.Format(time.RFC3339))
	return nil
}

func (rb *rebootstrap) logf(step rebootstrapStep, format string, args ...any) {
	rb.n.logf("%s: %s: %s", rebootstrapLabel, step, fmt.Sprintf(format, args...))
}

// kubeconfigState reads the kubelet's kubeconfig and pair again (Reload)
// and asks the API server about them (Manager.refusal).
func (rb *rebootstrap) kubeconfigState(ctx context.Context) kubeconfigState {
	m := rb.n.Manager
	err := m.Reload()
	if errors.Is(err, errNoKubeletCredentials) {
		return kubeconfigAbsent
	}
	if err != nil {
		return kubeconfigNotRefused
	}
	if rb.refusal = m.refusal(ctx); rb.refusal == notRefused {
		return kubeconfigNotRefused
	}
	return kubeconfigRefused
}

// errBootstrapKubeconfigUnusable: the bootstrap kubeconfig cannot replace
// the kubelet's credentials; only a fresh one will.
var errBootstrapKubeconfigUnusable = errors.New("cannot replace them")

// checkBootstrapKubeconfig checks that the bootstrap kubeconfig can replace
// the kubelet's credentials (in state): with its CA bundle and its token a
// SelfSubjectReview succeeds. Its error says why not, and what to do.
func (rb *rebootstrap) checkBootstrapKubeconfig(ctx context.Context, state kubeconfigState) error {
	m := rb.n.Manager
	path := m.cfg.BootstrapKubeconfigPath
	why := fmt.Sprintf("the kubelet's credentials are refused (%s)", rb.refusal)
	if state == kubeconfigAbsent {
		why = fmt.Sprintf("the kubelet's credentials are refused (the agent moved them aside to %s and %s)",
			refusedPath(m.store.CurrentPath()), refusedPath(m.cfg.KubeconfigPath))
	}
	err := m.checkBootstrapKubeconfig(ctx)
	if errors.Is(err, errBootstrapKubeconfigUnusable) {
		return fmt.Errorf("%s, and the bootstrap kubeconfig %s %w; the machine needs a fresh bootstrap kubeconfig at %s "+
			"(Carousel publishes it in the management cluster as %s)", why, path, err, path, publishedBootstrapKubeconfig)
	}
	if err != nil {
		return fmt.Errorf("%s, and the bootstrap kubeconfig %s could not be checked: %w", why, path, err)
	}
	rb.n.logf("%s: %s, and the bootstrap kubeconfig %s can replace them (the API server verifies, and authenticates its token)",
		rebootstrapLabel, why, path)
	return nil
}

// checkBootstrapKubeconfig asks the API server, with the bootstrap
// kubeconfig's CA bundle and token, who that token is (a SelfSubjectReview).
// The error wraps errBootstrapKubeconfigUnusable when the bootstrap
// kubeconfig cannot replace the kubelet's credentials: there is none, it
// does not load or names a credential plugin (bootstrapConfig), its token is
// refused, or it does not trust the API server.
// Other errors (the API server could not be asked) say nothing about it.
func (m *Manager) checkBootstrapKubeconfig(ctx context.Context) error {
	path := m.cfg.BootstrapKubeconfigPath
	if path == "" {
		return fmt.Errorf("%w: no --bootstrap-kubeconfig is configured", errBootstrapKubeconfigUnusable)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %w", errBootstrapKubeconfigUnusable, err)
	}
	cfg, err := bootstrapConfig(path)
	if err != nil {
		return fmt.Errorf("%w: it does not load: %w", errBootstrapKubeconfigUnusable, err)
	}
	cs, err := m.newClient(cfg)
	if err != nil {
		return err
	}
	reviewCtx, cancel := m.withRequestTimeout(ctx)
	err = reviewSelf(reviewCtx, cs)
	cancel()
	switch refusalOf(err) {
	case refusedUnauthorized:
		return fmt.Errorf("%w: its token is refused (the API server answers 401 Unauthorized)", errBootstrapKubeconfigUnusable)
	case refusedUntrustedServer:
		return fmt.Errorf("%w: it does not trust the API server (%w)", errBootstrapKubeconfigUnusable, err)
	}
	return err
}

// moveCredentialsAside renames the kubelet's refused current client pair
// (the kubelet-client-current.pem symlink) and kubeconfig to refusedPath, so
// that the kubelet bootstraps when it next starts. The pair goes first: a
// kubelet that finds its kubeconfig and no pair bootstraps as well, one that
// finds its pair and no kubeconfig does not (see the top of this file).
// Nothing else is moved, and no key is deleted: the pair's file stays where
// the symlink pointed, and the serving pair stays until it is replaced. It
// holds the renewal lock (lockRenewals), so that it never moves what a
// `refresh-certs run` is writing: while one runs it fails with ErrRenewing,
// before anything is recorded or moved, and is tried again.
func (rb *rebootstrap) moveCredentialsAside(context.Context) error {
	m := rb.n.Manager
	unlock, err := m.lockRenewals()
	if err != nil {
		return err
	}
	defer unlock()
	// Recorded first: a crash after a move must still restart the kubelet.
	// A move starts the re-bootstrap over.
	*rb.progress = progress{Request: rebootstrapRecord, CredentialsMovedAside: true}
	if err := rb.progress.save(m.cfg.CertDir); err != nil {
		return err
	}
	for _, path := range []string{m.store.CurrentPath(), m.cfg.KubeconfigPath} {
		err := os.Rename(path, refusedPath(path))
		if errors.Is(err, fs.ErrNotExist) {
			continue // moved by an attempt cut short
		}
		if err != nil {
			return err
		}
		if err := fsync.Dir(filepath.Dir(path)); err != nil {
			return err
		}
		rb.logf(rebootstrapMoveAside, "moved %s to %s", path, refusedPath(path))
	}
	return nil
}

// restartKubelet restarts the kubelet, which finds no client certificate and
// bootstraps with the bootstrap kubeconfig. It is recorded after the
// restart: a crash before that restarts the kubelet once more, and a
// bootstrapping kubelet restarted asks again (one more CSR, nothing lost).
func (rb *rebootstrap) restartKubelet(ctx context.Context) error {
	m := rb.n.Manager
	rb.logf(rebootstrapRestart, "restarting: the kubelet has no client certificate and kubeconfig, so it bootstraps with %s when it starts", m.cfg.BootstrapKubeconfigPath)
	if err := rb.n.Kubelet.restart(ctx); err != nil {
		return err
	}
	m.cfg.Metrics.kubeletRestarted()
	rb.progress.RestartedToBootstrap = true
	return rb.progress.save(m.cfg.CertDir)
}

// awaitBootstrap waits, at most the kubelet's restart timeout, until the
// kubelet has bootstrapped: its new kubeconfig and pair are on disk (Reload)
// and the API server took them (authenticated them, whether or not it
// allowed the review). An API server that cannot be asked is waited for:
// credentials recorded as taken and refused later are moved aside again.
func (rb *rebootstrap) awaitBootstrap(ctx context.Context) error {
	m, k := rb.n.Manager, rb.n.Kubelet
	timeout := k.restartTimeout()
	ctx, cancel := withClockTimeout(ctx, m.cfg.Clock, timeout)
	defer cancel()
	err := pollUntil(ctx, m.cfg.Clock, newBackoff(kubeletBackoff), func(ctx context.Context) error {
		if err := m.reloadUntilTheKubelets(); err != nil {
			return err
		}
		reviewCtx, cancel := m.withRequestTimeout(ctx)
		defer cancel()
		err := reviewSelf(reviewCtx, m.Client())
		if r := refusalOf(err); r != notRefused {
			return permanentError{fmt.Errorf("the kubelet bootstrapped again, but its new credentials are refused too (%s)", r)}
		}
		if err != nil && !apierrors.IsForbidden(err) {
			return fmt.Errorf("asking the API server whether it takes the kubelet's new credentials: %w", err)
		}
		return nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("the kubelet has not bootstrapped within %s: %w", timeout, err)
	}
	if err != nil {
		return err
	}
	info, err := readKubeconfig(m.cfg.KubeconfigPath)
	if err != nil {
		return err
	}
	cert := m.Current().Cert
	rb.logf(rebootstrapAwait, "bootstrapped: client certificate from issuer %s, valid until %s; the kubeconfig trusts cluster bundle %s",
		hex.EncodeToString(cert.AuthorityKeyId), cert.NotAfter.Format(time.RFC3339), noderenewal.Digest(info.CA))
	rb.progress.Bootstrapped = true
	return rb.progress.save(m.cfg.CertDir)
}

// resync brings the kubelet in line with the node trust bundles, with its
// new credentials (renewal.resyncSteps), sharing the re-bootstrap's record.
func (rb *rebootstrap) resync(ctx context.Context) error {
	r := &renewal{n: rb.n, label: rebootstrapLabel, record: rebootstrapRecord, progress: rb.progress}
	return r.run(ctx, r.resyncSteps())
}
