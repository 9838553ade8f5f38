package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParsePlist reads an XML property list whose root is a dict: strings, integers, reals, booleans,
// arrays and nested dicts (dates and data come back as strings).
func ParsePlist(data []byte) (map[string]any, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("no <plist>: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != "plist" {
				return nil, fmt.Errorf("root element <%s>, want <plist>", se.Name.Local)
			}
			break
		}
	}
	v, err := plistValue(d)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("the root value is not a <dict>")
	}
	return m, nil
}

// nextStart returns the next element (skipping text and comments), or nil at an end element.
func nextStart(d *xml.Decoder) (*xml.StartElement, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return &t, nil
		case xml.EndElement:
			return nil, nil
		case xml.CharData:
			if strings.TrimSpace(string(t)) != "" {
				return nil, fmt.Errorf("stray text %q", strings.TrimSpace(string(t)))
			}
		}
	}
}

func plistValue(d *xml.Decoder) (any, error) {
	se, err := nextStart(d)
	if err != nil {
		return nil, err
	}
	if se == nil {
		return nil, io.ErrUnexpectedEOF
	}
	return valueOf(d, se)
}

func valueOf(d *xml.Decoder, se *xml.StartElement) (any, error) {
	switch se.Name.Local {
	case "dict":
		m := map[string]any{}
		for {
			k, err := nextStart(d)
			if err != nil {
				return nil, err
			}
			if k == nil {
				return m, nil
			}
			if k.Name.Local != "key" {
				return nil, fmt.Errorf("<%s> where a <key> belongs", k.Name.Local)
			}
			var key string
			if err := d.DecodeElement(&key, k); err != nil {
				return nil, err
			}
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("duplicate key %q", key)
			}
			vs, err := nextStart(d)
			if err != nil {
				return nil, err
			}
			if vs == nil {
				return nil, fmt.Errorf("key %q has no value", key)
			}
			if m[key], err = valueOf(d, vs); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
	case "array":
		var a []any
		for {
			vs, err := nextStart(d)
			if err != nil {
				return nil, err
			}
			if vs == nil {
				return a, nil
			}
			v, err := valueOf(d, vs)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case "true", "false":
		if err := d.Skip(); err != nil {
			return nil, err
		}
		return se.Name.Local == "true", nil
	case "string", "date", "data":
		var s string
		err := d.DecodeElement(&s, se)
		return s, err
	case "integer":
		var s string
		if err := d.DecodeElement(&s, se); err != nil {
			return nil, err
		}
		return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	case "real":
		var s string
		if err := d.DecodeElement(&s, se); err != nil {
			return nil, err
		}
		return strconv.ParseFloat(strings.TrimSpace(s), 64)
	}
	return nil, fmt.Errorf("unknown plist element <%s>", se.Name.Local)
}
