package payload

import "strings"

// Refs is a set of kinds of input a request points at instead of
// carrying: content the provider reads from its own storage (a file, a
// stored response, conversation or prompt) or fetches (a document by
// URL), which it bills as input tokens Sluice cannot count from the body.
// The zero value is the empty set.
type Refs uint16

// The kinds of input by reference, each named by the field that carries
// it (Refs.String, the "param" of a refusal and a metrics label).
const (
	// RefFileID: a "file_id" anywhere in the prompt — OpenAI's
	// input_file, input_image and chat "file" parts, Anthropic's
	// document, image and container_upload blocks with a source of type
	// "file".
	RefFileID Refs = 1 << iota
	// RefFileURL: a "file_url" (OpenAI's input_file by URL).
	RefFileURL
	// RefURL: the "url" of an object of type "url" (Anthropic's document
	// and image sources by URL). An image_url's URL is not one: an
	// OpenAI image costs at most its per-image maximum (README.md, "Media").
	RefURL
	// RefItemReference: a responses input item of type "item_reference".
	RefItemReference
	// RefAudioID: a chat assistant message's "audio": {"id": …}, a
	// previous audio reply the provider holds.
	RefAudioID
	// RefPreviousResponseID: responses "previous_response_id".
	RefPreviousResponseID
	// RefConversation: responses "conversation".
	RefConversation
	// RefStoredPrompt: responses "prompt" (a stored prompt template by id).
	RefStoredPrompt
)

var refNames = [...]string{
	"file_id", "file_url", "url", "item_reference", "audio.id",
	"previous_response_id", "conversation", "prompt",
}

// Any reports whether the set is not empty.
func (r Refs) Any() bool { return r != 0 }

// First is the name of the first kind in the set (the order of the
// constants), "" for the empty set: the field a refusal names.
func (r Refs) First() string {
	for i, n := range refNames {
		if r&(1<<i) != 0 {
			return n
		}
	}
	return ""
}

// String lists the kinds in the set, comma-separated, in the order of
// the constants.
func (r Refs) String() string {
	var b strings.Builder
	for i, n := range refNames {
		if r&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// topLevelRef is the kind of input a top-level field points at.
func topLevelRef(f field) Refs {
	switch f {
	case fPreviousResponseID:
		return RefPreviousResponseID
	case fConversation:
		return RefConversation
	case fStoredPrompt:
		return RefStoredPrompt
	}
	return 0
}

// Where a scanned object sits, for the rules that depend on its parent's
// key (scanner.ctx).
const (
	ctxNone     uint8 = iota
	ctxImageURL       // the value of "image_url": its "url" is an image
	ctxAudio          // the value of "audio": its "id" is a stored reply
)

// typeRef is the kind of input an object's "type" value (decoded prefix
// p, whole if complete) makes it: an item reference, or a source by URL
// (flagged by the caller at the object's end, with its "url").
func typeRef(p []byte, whole bool) (item, urlSource bool) {
	if !whole {
		return false, false
	}
	switch string(p) {
	case "item_reference":
		return true, false
	case "url":
		return false, true
	}
	return false, false
}
