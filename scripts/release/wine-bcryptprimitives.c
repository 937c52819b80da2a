/* ProcessPrng, which Rust's standard library takes its random bytes from on
 * Windows (bcryptprimitives.dll, Windows 10 and later), for wine 8 (Debian
 * 12), which lacks it: built by scripts/release/prove.sh beside the Windows
 * binary it runs under wine, never shipped. Wine's RtlGenRandom fills it. */
#include <windows.h>
#include <ntsecapi.h>

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  while (len > 0) {
    ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
    if (!RtlGenRandom(data, n)) return FALSE;
    data += n;
    len -= n;
  }
  return TRUE;
}
