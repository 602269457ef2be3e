package nodeagent

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/carousel-dev/carousel/pkg/fsync"
)

// progressFile, in the cert dir, records how far the in-place renewal of a
// request (or a re-bootstrap of the kubelet, see rebootstrap.go) got, so
// that one resumed after a crash neither forgets that the kubelet has yet to
// load what changed nor renews twice. There is one record at a time: a
// re-bootstrap replaces the record of a renewal it interrupted, which then
// starts over.
const progressFile = "carousel-node-agent-renewal.json"

// progress is the record. Each step records what it is about to change
// before it changes it: a crash in between leaves a record that claims a
// change that was not made, which at worst restarts the kubelet once more.
type progress struct {
	// Request is the request the record is for (noderenewal.Request.String),
	// or rebootstrapRecord.
	Request string  `json:"request"`
	Changes Changes `json:"changes"`
	// ClientRenewed: the client certificate for the request is stored.
	ClientRenewed bool `json:"clientRenewed,omitempty"`
	// ServingRenewed: the serving certificate for the request is stored.
	ServingRenewed bool `json:"servingRenewed,omitempty"`
	// Restarted: the kubelet was restarted after all the changes.
	Restarted bool `json:"restarted,omitempty"`

	// CredentialsMovedAside (re-bootstrap): the kubelet's refused client
	// pair and kubeconfig are moved aside, or about to be, so that the
	// kubelet bootstraps again when it starts.
	CredentialsMovedAside bool `json:"credentialsMovedAside,omitempty"`
	// RestartedToBootstrap (re-bootstrap): the kubelet was restarted after
	// the move, to bootstrap.
	RestartedToBootstrap bool `json:"restartedToBootstrap,omitempty"`
	// Bootstrapped (re-bootstrap): the kubelet bootstrapped again, and the
	// API server took its new credentials.
	Bootstrapped bool `json:"bootstrapped,omitempty"`
}

// loadProgress returns the record named request (see progress.Request) in
// dir: empty when there is none, or one for another request, or one that
// does not parse.
func loadProgress(dir, request string) (*progress, error) {
	fresh := &progress{Request: request}
	data, err := os.ReadFile(filepath.Join(dir, progressFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fresh, nil
	}
	if err != nil {
		return nil, err
	}
	var p progress
	if json.Unmarshal(data, &p) != nil || p.Request != fresh.Request {
		return fresh, nil
	}
	return &p, nil
}

func (p *progress) save(dir string) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, progressFile), data)
}

// clearProgress removes the record once the request is reported, on disk:
// a record back after a crash would skip the renewals it says were done if
// the same request were asked again.
func clearProgress(dir string) error {
	switch err := os.Remove(filepath.Join(dir, progressFile)); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return fsync.Dir(dir)
}
