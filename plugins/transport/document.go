package transport

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
)

// ErrNotText: a part's body is not valid UTF-8, so it cannot be carried in
// the JSON document of the webhook and file-sink transports.
var ErrNotText = errors.New("transport: part body is not UTF-8 text")

// Document is the JSON body the webhook transport POSTs and the file sink
// writes: the message with its parts as text. docs/transports.md shows it.
type Document struct {
	IntentID  string         `json:"intent_id"`
	Attempt   uint32         `json:"attempt"`
	Channel   string         `json:"channel"`
	Recipient string         `json:"recipient"`
	Parts     []DocumentPart `json:"parts"`
}

// DocumentPart is one part of a Document.
type DocumentPart struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

// EncodeDocument renders m as a Document; a part that is not UTF-8 text is
// ErrNotText (the name of the part, never its content, is in the error).
func EncodeDocument(m Message) ([]byte, error) {
	d := Document{IntentID: m.IntentID, Attempt: m.Attempt, Channel: m.Channel, Recipient: m.Recipient.Value(),
		Parts: make([]DocumentPart, len(m.Parts))}
	for i, p := range m.Parts {
		if !utf8.Valid(p.Body) {
			return nil, fmt.Errorf("%w: part %s", ErrNotText, p.Name)
		}
		d.Parts[i] = DocumentPart{Name: p.Name, ContentType: p.ContentType, Body: string(p.Body)}
	}
	return json.Marshal(d, json.Deterministic(true))
}
