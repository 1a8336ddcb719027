package protocol

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MinVolunteerKey is the shortest volunteer key accepted: 22 characters of
// base64url carry 128 bits, too many to guess another volunteer's.
const MinVolunteerKey = 22

// MaxVolunteerName is the longest display name, in bytes.
const MaxVolunteerName = 64

// CheckVolunteerKey reports what is wrong with a volunteer key, or nil.
func CheckVolunteerKey(k string) error {
	if !validVolunteerKey(k) {
		return fmt.Errorf("want %d..%d characters of A-Z, a-z, 0-9, '-' and '_' (a random key made once), got %d characters",
			MinVolunteerKey, MaxShortText, len(k))
	}
	return nil
}

func validVolunteerKey(k string) bool {
	if len(k) < MinVolunteerKey || len(k) > MaxShortText {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CheckVolunteerName reports what is wrong with a display name: longer
// than MaxVolunteerName bytes, not UTF-8, or holding control or format
// characters (a newline could forge a log line, a bidi override could
// garble the leaderboard). Empty is allowed: the volunteer stays anonymous.
func CheckVolunteerName(name string) error {
	switch {
	case len(name) > MaxVolunteerName:
		return fmt.Errorf("%d bytes, at most %d allowed", len(name), MaxVolunteerName)
	case !utf8.ValidString(name):
		return errors.New("not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("holds the control or format character %U; use letters, digits, punctuation and spaces", r)
		}
	}
	return nil
}
