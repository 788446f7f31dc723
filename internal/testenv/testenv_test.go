package testenv

import (
	"context"
	"log/slog"
	"testing"
)

// counted is a log value that counts its formatting.
type counted struct{ n *int }

func (c counted) LogValue() slog.Value {
	*c.n++
	return slog.StringValue("v")
}

// TestQuietFormats: Quiet formats its records at Info and above, and
// not those below.
func TestQuietFormats(t *testing.T) {
	log := Quiet()
	if log.Enabled(context.Background(), slog.LevelDebug) || !log.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal("Quiet should log Info and above only")
	}
	var n int
	log.Debug("skipped", "v", counted{&n})
	log.Info("formatted", "v", counted{&n})
	log.Error("formatted", "v", counted{&n})
	if n != 2 {
		t.Errorf("%d records formatted, want 2", n)
	}
}
