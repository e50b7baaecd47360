/*
 * memcheck runs in the test guest and finds guest memory a live migration
 * failed to carry over (TestMigrationMemoryIntegrity). It rewrites every
 * page of a 24 MiB buffer pass after pass, each pass with a pattern of its
 * own (a function of the pass, the page and the word), and before it
 * rewrites a page it checks that the page still holds the previous pass's
 * pattern. In a migrated guest, a page whose last write before the
 * switch-over did not reach the target holds an older pass: memcheck
 * prints "VL-STALE pass N page P word W holds pass K". Every 8 passes it
 * prints "VL-MEMCHECK pass N stale S".
 *
 * Freestanding (no libc, raw x86-64 Linux system calls), so that the
 * binary is a few KiB and fits in a VMI's user-data (256 KiB at most):
 *   cc -Os -static -nostdlib -fno-builtin -fno-stack-protector -fno-pie -no-pie
 */
typedef unsigned long u64;

enum { PAGES = 6144, WORDS = 4096 / 8 };

static long syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

static void say(const char *s, long n) { syscall6(1 /* write */, 1, (long)s, n, 0, 0, 0); }

static char *num(char *p, u64 v)
{
	char t[24];
	int n = 0;
	do {
		t[n++] = '0' + v % 10;
		v /= 10;
	} while (v);
	while (n)
		*p++ = t[--n];
	return p;
}

static char *str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

/* Word w of page pg after pass n: distinct for every pass, page and word. */
static u64 pattern(u64 n, u64 pg, u64 w) { return ((n << 24) | (pg << 9) | w) * 0x9E3779B97F4A7C15UL; }

void _start(void)
{
	/* PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE */
	long m = syscall6(9 /* mmap */, 0, PAGES * 4096L, 3, 0x22 | 0x8000, -1, 0);
	u64 *buf = (u64 *)m, stale = 0;
	char line[160], *p;

	if (m < 0 && m > -4096) {
		say("VL-MEMCHECK-FAILED mmap\n", 24);
		syscall6(60 /* exit */, 1, 0, 0, 0, 0, 0);
	}
	for (u64 n = 1;; n++) {
		for (u64 pg = 0; pg < PAGES; pg++) {
			u64 *q = buf + pg * WORDS;
			for (u64 w = 0; n > 1 && w < WORDS; w++) {
				if (q[w] == pattern(n - 1, pg, w))
					continue;
				u64 held = 0;
				for (u64 k = n - 1; k >= 1; k--) {
					if (q[w] == pattern(k, pg, w)) {
						held = k;
						break;
					}
				}
				stale++;
				p = str(line, "VL-STALE pass ");
				p = num(p, n);
				p = str(p, " page ");
				p = num(p, pg);
				p = str(p, " word ");
				p = num(p, w);
				p = str(p, " holds pass ");
				p = num(p, held);
				p = str(p, "\n");
				say(line, p - line);
				break;
			}
			for (u64 w = 0; w < WORDS; w++)
				q[w] = pattern(n, pg, w);
		}
		if (n % 8 == 0) {
			p = str(line, "VL-MEMCHECK pass ");
			p = num(p, n);
			p = str(p, " stale ");
			p = num(p, stale);
			p = str(p, "\n");
			say(line, p - line);
		}
	}
}
