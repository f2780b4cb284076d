package storetest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dashgate/dashgate/store"
)

// The attachment cases of the conformance table (issue 42).

func attachment(id, sid, owner, name string, data []byte) store.Attachment {
	kind, typ := store.ClassifyAttachment(data, "")
	return store.Attachment{
		AttachmentRef: store.AttachmentRef{ID: id, Name: name, Type: typ, Kind: kind, Size: int64(len(data))},
		SessionID:     sid, Owner: owner, CreatedAt: at(time.Second), Data: data,
	}
}

func put(t *testing.T, st store.Store, a store.Attachment) {
	t.Helper()
	if err := st.PutAttachment(t.Context(), a); err != nil {
		t.Fatalf("PutAttachment(%s): %v", a.ID, err)
	}
}

// has reports whether owner's attachment id of sid is stored, failing t on
// any error but ErrNotFound.
func has(t *testing.T, st store.Store, owner, sid, id string) bool {
	t.Helper()
	_, err := st.Attachment(t.Context(), owner, sid, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Attachment(%s): %v", id, err)
	}
	return err == nil
}

// testAttachments: the bytes round-trip for their owner and session only,
// before the session's row is stored too; an entry keeps its references;
// DeleteAttachment takes back one.
func testAttachments(t *testing.T, st store.Store) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 64<<10)...) // 256 KiB, NULs and all
	img := attachment("a1", "s1", "ann", "chart.png", png)
	put(t, st, img) // before its session's row: the page uploads before the prompt is stored
	put(t, st, attachment("a2", "s1", "ann", "empty.txt", nil))
	put(t, st, attachment("b1", "s2", "bob", "bob's.txt", []byte("bob's words")))
	if err := st.PutAttachment(t.Context(), attachment("a1", "s1", "ann", "again.txt", []byte("x"))); err == nil {
		t.Errorf("PutAttachment of a taken id succeeded")
	}
	got, err := st.Attachment(t.Context(), "ann", "s1", "a1")
	if err != nil {
		t.Fatalf("Attachment: %v", err)
	}
	if got.AttachmentRef != img.AttachmentRef || got.SessionID != "s1" || got.Owner != "ann" || !got.CreatedAt.Equal(img.CreatedAt) ||
		!bytes.Equal(got.Data, png) {
		t.Errorf("Attachment = %+v (%d bytes); want %+v (%d bytes)", got.AttachmentRef, len(got.Data), img.AttachmentRef, len(png))
	}
	if got.Kind != store.AttachImage || got.Type != "image/png" {
		t.Errorf("kind, type = %q, %q; want image, image/png", got.Kind, got.Type)
	}
	if e, err := st.Attachment(t.Context(), "ann", "s1", "a2"); err != nil || len(e.Data) != 0 || e.Size != 0 {
		t.Errorf("empty attachment = %d bytes, size %d, %v; want 0, 0, nil", len(e.Data), e.Size, err)
	}
	for _, tc := range []struct{ name, owner, sid, id string }{
		{"another owner", "bob", "s1", "a1"},
		{"the anonymous user", "", "s1", "a1"},
		{"another session", "ann", "s2", "a1"},
		{"unknown id", "ann", "s1", "zz"},
		{"bob's by ann", "ann", "s2", "b1"},
	} {
		if _, err := st.Attachment(t.Context(), tc.owner, tc.sid, tc.id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Attachment, %s: %v; want ErrNotFound", tc.name, err)
		}
		if ok, err := st.DeleteAttachment(t.Context(), tc.owner, tc.sid, tc.id); ok || err != nil {
			t.Errorf("DeleteAttachment, %s = %v, %v; want false, nil", tc.name, ok, err)
		}
	}
	if !has(t, st, "ann", "s1", "a1") || !has(t, st, "bob", "s2", "b1") {
		t.Fatalf("a refused DeleteAttachment deleted something")
	}

	// The prompt that sent them names them; the history gives them back.
	refs := []store.AttachmentRef{img.AttachmentRef, attachment("a2", "s1", "ann", "empty.txt", nil).AttachmentRef}
	prompt := entry("s1", 1, "what does this show?", at(2*time.Second))
	prompt.Attachments = refs
	apply(t, st, store.Batch{Sessions: []store.Session{live("s1", "ann")}, Entries: []store.SessionEntry{prompt, entry("s1", 2, "no files", at(3*time.Second))}})
	hist, _, err := st.HistoryFor(t.Context(), "ann", "s1", 0, 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("HistoryFor = %v, %v", seqs(hist), err)
	}
	if !slices.Equal(hist[0].Attachments, refs) {
		t.Errorf("history attachments = %+v; want %+v", hist[0].Attachments, refs)
	}
	if hist[1].Attachments != nil {
		t.Errorf("an entry without attachments has %+v", hist[1].Attachments)
	}

	if ok, err := st.DeleteAttachment(t.Context(), "ann", "s1", "a2"); !ok || err != nil {
		t.Errorf("DeleteAttachment = %v, %v; want true, nil", ok, err)
	}
	if has(t, st, "ann", "s1", "a2") || !has(t, st, "ann", "s1", "a1") {
		t.Errorf("after DeleteAttachment(a2): a2 stored %v, a1 stored %v; want false, true", has(t, st, "ann", "s1", "a2"), has(t, st, "ann", "s1", "a1"))
	}
}

// testAttachmentSearch: search finds a prompt by its attachments' names,
// alone or with words of its text, for its owner only, and the snippet
// shows the name that matched.
func testAttachmentSearch(t *testing.T, st store.Store) {
	prompt := entry("s1", 1, "please summarise this", t0)
	prompt.Attachments = []store.AttachmentRef{{ID: "a1", Name: "Quarterly-Report_2024.pdf", Type: "application/pdf", Kind: store.AttachPDF, Size: 10}}
	other := entry("s2", 1, "please summarise this", t0)
	other.Attachments = []store.AttachmentRef{{ID: "b1", Name: "quarterly-bob.pdf", Type: "application/pdf", Kind: store.AttachPDF, Size: 10}}
	apply(t, st, store.Batch{
		Sessions: []store.Session{live("s1", "ann"), live("s2", "bob")},
		Entries:  []store.SessionEntry{prompt, entry("s1", 2, "a reply about nothing", at(time.Second)), other},
	})
	for _, q := range []string{"quarterly", "Quarterly-Report_2024.pdf", "quart summ", "report 2024", "pdf"} {
		hits, err := st.Search(t.Context(), "ann", q, 10)
		if err != nil || !slices.Equal(hitKeys(hits), []string{"s1/1"}) {
			t.Errorf("Search(%q) = %v, %v; want [s1/1]", q, hitKeys(hits), err)
			continue
		}
		if q == "quarterly" && !strings.Contains(hits[0].Snippet, "Quarterly") {
			t.Errorf("Search(%q) snippet = %q; want the file's name", q, hits[0].Snippet)
		}
	}
	if hits, err := st.Search(t.Context(), "ann", "bob", 10); err != nil || len(hits) != 0 {
		t.Errorf("Search for another owner's file = %v, %v; want none", hitKeys(hits), err)
	}
	// A checkpoint rewrite of the entry keeps it findable by the new names only.
	prompt.Attachments = []store.AttachmentRef{{ID: "a1", Name: "renamed.txt", Type: "text/plain", Kind: store.AttachText, Size: 10}}
	apply(t, st, store.Batch{Entries: []store.SessionEntry{prompt}})
	if hits, err := st.Search(t.Context(), "ann", "quarterly", 10); err != nil || len(hits) != 0 {
		t.Errorf("Search for a replaced name = %v, %v; want none", hitKeys(hits), err)
	}
	if hits, err := st.Search(t.Context(), "ann", "renamed", 10); err != nil || !slices.Equal(hitKeys(hits), []string{"s1/1"}) {
		t.Errorf("Search for the new name = %v, %v; want [s1/1]", hitKeys(hits), err)
	}
}

// testAttachmentsGoWithSession: Delete, a batch's Deletes and Prune
// remove a session's attachments, and only its.
func testAttachmentsGoWithSession(t *testing.T, st store.Store) {
	apply(t, st, store.Batch{Sessions: []store.Session{
		live("del", "ann"), live("batch", "ann"), closedAt("old", "ann", t0), live("keep", "ann"),
	}})
	for _, sid := range []string{"del", "batch", "old", "keep"} {
		put(t, st, attachment("x-"+sid, sid, "ann", sid+".txt", []byte(sid)))
	}
	if ok, err := st.Delete(t.Context(), "ann", "del"); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	apply(t, st, store.Batch{Deletes: []string{"batch"}})
	if n, err := st.Prune(t.Context(), at(time.Hour)); n != 1 || err != nil {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	for _, sid := range []string{"del", "batch", "old"} {
		if has(t, st, "ann", sid, "x-"+sid) {
			t.Errorf("the attachment of session %q outlived it", sid)
		}
	}
	if !has(t, st, "ann", "keep", "x-keep") {
		t.Errorf("the attachment of a session that stays went too")
	}
	// A session made again under a deleted id has none of the old files.
	apply(t, st, store.Batch{Sessions: []store.Session{live("del", "ann")}})
	if has(t, st, "ann", "del", "x-del") {
		t.Errorf("a new session under a deleted id has its old attachment")
	}
}
