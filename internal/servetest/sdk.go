package servetest

import (
	"fmt"
	"reflect"
	"testing"
)

// UnknownFields reports, as test errors, every object under v (a value
// an official SDK decoded: openai-go, anthropic-sdk-go) whose JSON had
// fields the SDK does not know (its JSON.ExtraFields), reading unions as
// each of their variants (AsAny), since a union keeps no extra fields
// itself. path names v in the messages.
func UnknownFields(t testing.TB, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			UnknownFields(t, path, v.Elem())
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			UnknownFields(t, fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Struct:
		if j := v.FieldByName("JSON"); j.IsValid() && j.Kind() == reflect.Struct {
			if ef := j.FieldByName("ExtraFields"); ef.IsValid() && ef.Len() > 0 {
				t.Errorf("%s: fields the SDK does not know: %v", path, ef.MapKeys())
			}
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Name != "JSON" {
				UnknownFields(t, path+"."+f.Name, v.Field(i))
			}
		}
		if as := v.MethodByName("AsAny"); as.IsValid() {
			UnknownFields(t, path+".AsAny", as.Call(nil)[0])
		}
	}
}
