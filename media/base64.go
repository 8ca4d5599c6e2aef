package media

import (
	"encoding/base64"
	"strings"
)

// DecodedLen is the most bytes the base64 text b64 decodes to: three for
// every four characters, less its padding. Line breaks, which the decoder
// skips, count as characters, so it may be a little over.
func DecodedLen(b64 string) int64 {
	n := int64(len(b64))
	for i := 0; i < 2 && n > 0 && b64[n-1] == '='; i++ {
		n--
	}
	return n/4*3 + (n%4*3)/4
}

// DecodeBase64 decodes the base64 text of a medium of kind k (standard
// alphabet, padded or not; line breaks are skipped). Before it decodes, it
// refuses text that would decode to more than lim's bytes for k
// (--max-image-bytes or --max-audio-bytes).
func DecodeBase64(b64 string, k Kind, lim Limits) ([]byte, error) {
	max, flag := lim.maxBytes(k)
	if n := DecodedLen(b64); n > max {
		return nil, overLimit(k, flag, "%s is %d bytes, over --%s %d", k, n, flag, max)
	}
	data, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
	if err != nil {
		return nil, invalid(k, err, "%s is not valid base64: %v", k, err)
	}
	return data, nil
}

// ParseDataURL decodes a data URL holding a medium of kind k,
// "data:image/png;base64,iVBORw0…", into its MIME type ("image/png",
// lower case, "" when the URL names none) and its bytes. Only base64 data
// URLs are taken. As DecodeBase64, it checks the size bound on the encoded
// length before decoding.
func ParseDataURL(s string, k Kind, lim Limits) (mime string, data []byte, err error) {
	if len(s) < 5 || !strings.EqualFold(s[:5], "data:") {
		return "", nil, invalid(k, nil, "%s URL is not a data URL (data:MIME;base64,...)", k)
	}
	head, b64, ok := strings.Cut(s[5:], ",")
	if !ok {
		return "", nil, invalid(k, nil, "%s data URL has no ',' before its data", k)
	}
	params := strings.Split(head, ";")
	if len(params) < 2 || !strings.EqualFold(strings.TrimSpace(params[len(params)-1]), "base64") {
		return "", nil, invalid(k, nil, "%s data URL is not base64: want data:MIME;base64,...", k)
	}
	data, err = DecodeBase64(b64, k, lim)
	if err != nil {
		return "", nil, err
	}
	return strings.ToLower(strings.TrimSpace(params[0])), data, nil
}
