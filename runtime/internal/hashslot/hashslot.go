// Package hashslot computes Redis Cluster hash slots (CRC16/XMODEM of the
// effective hash tag, modulo 16384) exactly as the server does, so the guard
// and the key builder can check same-slot groups before anything is sent.
package hashslot

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// Of returns the hash slot of key, honouring the first non-empty {...} tag.
func Of(key string) uint16 {
	return crc16(Tag(key)) % Count
}

// Tag returns the part of key that Redis hashes: the content of the first
// "{...}" pair when it is non-empty, otherwise the whole key.
func Tag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key
					}
					return key[i+1 : j]
				}
			}
			return key
		}
	}
	return key
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
