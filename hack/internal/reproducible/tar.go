// Package reproducible writes tar streams in which nothing of the machine or the moment gets in, so that the
// same entries give the same bytes: what the image's layer (hack/image) and the release's archives
// (hack/release) are made of.
package reproducible

import (
	"archive/tar"
	"fmt"
	"io"
	"time"
)

// Entry is one member of a tar stream: a regular file with Data, or, with Dir, a directory (its Name ends in
// a slash by convention).
type Entry struct {
	Name     string
	Mode     int64
	UID, GID int
	Dir      bool
	Data     []byte
}

// WriteTar writes the entries to w in the order given, in the USTAR format (no PAX records, so no access or
// change times), each modified at mtime (whole seconds, UTC) and owned by its numeric UID and GID with no
// user or group name.
func WriteTar(w io.Writer, entries []Entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{
			Typeflag: tar.TypeReg, Name: e.Name, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			Size: int64(len(e.Data)), ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatUSTAR,
		}
		if e.Dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
	}
	return tw.Close()
}
