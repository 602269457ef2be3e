package main

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/carousel-dev/carousel/hack/internal/reproducible"
)

// member is one file of an archive: its name in the archive, where its bytes
// are, and whether it is a program (mode 0755) or not (0644).
type member struct {
	Name       string
	Path       string
	Executable bool
}

func (m member) mode() int64 {
	if m.Executable {
		return 0o755
	}
	return 0o644
}

// zipEpoch is the earliest time an MS-DOS date, the one every zip reader
// knows, can hold.
var zipEpoch = time.Date(1980, time.January, 1, 0, 0, 0, 0, time.UTC)

// writeTarGz writes the members, in the order given, as a gzipped tar to w:
// each a plain file owned by 0:0, modified at mtime, as reproducible.WriteTar
// writes them, and a gzip header with no name and no time. The same members
// and mtime give the same bytes. (The default compression level: the best one
// makes a Go program's archive 0.5 % smaller in three times the time.)
func writeTarGz(w io.Writer, members []member, mtime time.Time) error {
	entries := make([]reproducible.Entry, 0, len(members))
	for _, m := range members {
		data, err := os.ReadFile(m.Path)
		if err != nil {
			return err
		}
		entries = append(entries, reproducible.Entry{Name: m.Name, Mode: m.mode(), Data: data})
	}
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	if err := reproducible.WriteTar(gz, entries, mtime); err != nil {
		return err
	}
	return gz.Close()
}

// writeZip writes the members, in the order given, as a zip to w, with the
// same guarantees as writeTarGz: each entry deflated, modified at mtime (in UTC, and not before 1980, which the zip format cannot
// express), with Unix permissions and no other metadata.
func writeZip(w io.Writer, members []member, mtime time.Time) error {
	mtime = mtime.UTC().Truncate(time.Second)
	if mtime.Before(zipEpoch) {
		mtime = zipEpoch
	}
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.DefaultCompression)
	})
	for _, m := range members {
		data, err := os.ReadFile(m.Path)
		if err != nil {
			return err
		}
		hdr := &zip.FileHeader{Name: m.Name, Method: zip.Deflate, Modified: mtime}
		hdr.SetMode(os.FileMode(m.mode()))
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if _, err := io.Copy(fw, bytes.NewReader(data)); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	return zw.Close()
}

// writeArchive writes the members to path, as a zip if its name ends in
// .zip and as a gzipped tar otherwise.
func writeArchive(path string, members []member, mtime time.Time) error {
	var buf bytes.Buffer
	var err error
	if filepath.Ext(path) == ".zip" {
		err = writeZip(&buf, members, mtime)
	} else {
		err = writeTarGz(&buf, members, mtime)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
