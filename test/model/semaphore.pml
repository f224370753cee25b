/*
 * A model of the semaphore's server-side protocol (src/lock/store/semaphore_scripts.hpp: acquire,
 * release and leave, extend), checked exhaustively by spin for three processes sharing two
 * permits, one of them asking for both (as a read-write lock's writer asks for all of them).
 * See README.md for what is modelled and what is abstracted.
 *
 * Switches (spin -D...):
 *   DRIFT_BROKEN  a mutation for the test of the checker itself: a holder's local deadline ends
 *                 1 ms after its holding's score; the capacity must then be exceeded.
 *   FIFO_BROKEN   a mutation: a call is admitted when its own permits are free, whatever is
 *                 queued ahead of it; the queue's order must then be broken.
 *
 * Every script runs in one d_step; the properties are assertions:
 *   cap_ok      the permits of the holdings whose local deadline has not passed never exceed
 *               the capacity
 *   fence_ok    every grant's fence is larger than every earlier one
 *   fifo_ok     an admitted call takes no permit that a live entry ahead of it in the queue
 *               waits for: the live holdings, the entries ahead and the call fit together
 *   ttl_ok      every key that exists has an expiry
 *   outlive_ok  the semaphore's hash expires no earlier than any live holding or queue entry,
 *               the holdings' keys and the queue's keys no earlier than what they hold
 */

#ifndef N
#define N 3
#endif
#ifndef TMAX
#define TMAX 8
#endif
#ifndef MAXDEAD
#define MAXDEAD N
#endif
#define CAP 2     /* the capacity */
#define TTL 3     /* a holding's ttl, in ticks (ms) */
#define CLAIM 1   /* how long a woken entry is kept */
#define QLIFE 2   /* a queue entry's lifetime */
#define S 2       /* fence units (the server's microseconds) per tick */
#define NOEXP 255 /* no expiry (a key made by HSET, ZADD or RPUSH before its PEXPIRE) */

#define IDLE 0
#define WAIT 1
#define HOLD 2
#define DONE 3

mtype = {is_granted, waits, leaves, releases, renews, lost, dies, tick}

byte now = 1;

/* p{name}: capacity (constant here) and fence */
bool hexists;
byte hfence;
byte hexp;
/* p{name}:h, the holdings: each process's score (0: not a member) */
byte hs[N];
byte hsexp;
/* p{name}:hw, the weights of holdings of more than one permit (0: no field) */
byte hw[N];
byte hwexp;
/* p{name}:q, the waiting calls (one per process: its token) */
byte q[N];
byte qlen;
byte qexp;
/* p{name}:qd, each waiting call's entry: deadline (0: no field), woken */
byte qdl[N];
bool qwoken[N];
byte qdexp;

bool alive[N];
byte st[N];
byte want[N]; /* permits the process's call asks for */
byte ldl[N];  /* its holding's local deadline, in server time */

/* Ghosts. */
byte last_fence;
byte ndead;

hidden byte i, j, x, y, f, used, nfree, ahead, qa;
hidden byte blocked, found, granted, hx, fresh, zx;
hidden byte fits, cap_ok, fence_ok, fifo_ok, ttl_ok, outlive_ok;

inline exists_entries() {
    hx = false;
    i = 0;
    do
    :: i < N -> if :: qdl[i] != 0 -> hx = true :: else fi; i++
    :: else -> break
    od
}

inline exists_holdings() {
    zx = false;
    i = 0;
    do
    :: i < N -> if :: hs[i] != 0 -> zx = true :: else fi; i++
    :: else -> break
    od
}

inline exists_weights() {
    y = false;
    i = 0;
    do
    :: i < N -> if :: hw[i] != 0 -> y = true :: else fi; i++
    :: else -> break
    od
}

inline lrem(p) {
    j = 0;
    do
    :: j < qlen && q[j] != p -> j++
    :: else -> break
    od;
    if
    :: j < qlen ->
        do
        :: j + 1 < qlen -> q[j] = q[j + 1]; j++
        :: else -> break
        od;
        qlen--;
        q[qlen] = 0;
        if :: qlen == 0 -> qexp = 0 :: else fi
    :: else
    fi
}

inline entry_del(p) {
    qdl[p] = 0;
    qwoken[p] = false;
    exists_entries();
    if :: !hx -> qdexp = 0 :: else fi
}

inline weight_del(p) {
    hw[p] = 0;
    exists_weights();
    if :: !y -> hwexp = 0 :: else fi
}

/* held(): removes the expired holdings (score <= now) with their weights; used: the permits of
 * the live ones. */
inline held() {
    j = 0;
    do
    :: j < N ->
        if :: hs[j] != 0 && hs[j] <= now -> hs[j] = 0; weight_del(j) :: else fi;
        j++
    :: else -> break
    od;
    exists_holdings();
    if :: !zx -> hsexp = 0 :: else fi;
    used = 0;
    j = 0;
    do
    :: j < N ->
        if
        :: hs[j] != 0 -> if :: hw[j] != 0 -> used = used + hw[j] :: else -> used++ fi
        :: else
        fi;
        j++
    :: else -> break
    od
}

/* wake_entry: told once, and kept for the claim at most ("g" not modelled: a waiting call asks
 * again whenever it likes). */
inline wake_entry(e) {
    if
    :: !qwoken[e] ->
        if :: now + CLAIM < qdl[e] -> qdl[e] = now + CLAIM :: else fi;
        qwoken[e] = true
    :: else
    fi
}

/* walk(nfree, stop_at, wake?): ahead, blocked, found. A lapsed entry is removed. */
inline walk(stop_at, wakes) {
    ahead = 0;
    blocked = false;
    found = false;
    j = 0;
    do
    :: j < qlen && q[j] == stop_at -> found = true; break
    :: j < qlen && q[j] != stop_at ->
        x = q[j];
        if
        :: qdl[x] != 0 && qdl[x] >= now ->
            if
            :: ahead + want[x] > nfree -> blocked = true; break
            :: else ->
                ahead = ahead + want[x];
                if :: wakes -> wake_entry(x) :: else fi;
                j++
            fi
        :: else -> /* lapsed: removed (the list shifts under j) */
            entry_del(x);
            f = j;
            lrem(x);
            j = f
        fi
    :: else -> break
    od
}

inline keep_hash(ms, isfresh) {
    if
    :: isfresh -> hexp = now + ms
    :: else -> if :: hexp != NOEXP && hexp < now + ms -> hexp = now + ms :: else fi
    fi
}

/* fits: whether the live holdings' permits, those of the live entries ahead of p and p's call
 * fit in the capacity; computed before the script changes anything, asserted when p is
 * admitted. */
inline fits_ahead(p) {
    y = 0;
    j = 0;
    do
    :: j < N -> if :: hs[j] > now -> y = y + (hw[j] != 0 -> hw[j] : 1) :: else fi; j++
    :: else -> break
    od;
    j = 0;
    do
    :: j < qlen && q[j] == p -> break
    :: j < qlen && q[j] != p ->
        if :: qdl[q[j]] != 0 && qdl[q[j]] >= now -> y = y + want[q[j]] :: else fi;
        j++
    :: else -> break
    od;
    fits = (y + want[p] <= CAP)
}

inline check_state() {
    y = 0;
    i = 0;
    do
    :: i < N -> if :: alive[i] && st[i] == HOLD && now < ldl[i] -> y = y + want[i] :: else fi; i++
    :: else -> break
    od;
    cap_ok = (y <= CAP);
    assert(cap_ok);
    exists_entries();
    exists_holdings();
    exists_weights();
    ttl_ok = (!hexists || hexp != NOEXP) && (!zx || hsexp != NOEXP) && (!y || hwexp != NOEXP) &&
             (qlen == 0 || qexp != NOEXP) && (!hx || qdexp != NOEXP);
    assert(ttl_ok);
    outlive_ok = true;
    i = 0;
    do
    :: i < N ->
        if
        :: hs[i] > now -> /* a live holding */
            if :: !hexists || hexp < hs[i] || hsexp < hs[i] -> outlive_ok = false :: else fi;
            if :: hw[i] != 0 && hwexp < hs[i] -> outlive_ok = false :: else fi;
            if :: want[i] > 1 && hw[i] == 0 -> outlive_ok = false :: else fi
        :: else
        fi;
        if
        :: qdl[i] >= now -> /* a live entry */
            if :: !hexists || hexp < qdl[i] || qdexp < qdl[i] -> outlive_ok = false :: else fi
        :: else
        fi;
        i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < qlen -> if :: qdl[q[i]] > qexp -> outlive_ok = false :: else fi; i++
    :: else -> break
    od;
    assert(outlive_ok)
}

inline acquire(p) {
    fresh = !hexists;
    held();
    nfree = CAP - used;
    granted = false;
    found = false;
    if
    :: nfree > 0 ->
        walk(p, true);
#ifdef FIFO_BROKEN
        granted = want[p] <= nfree
#else
        granted = !blocked && ahead + want[p] <= nfree
#endif
    :: else
    fi;
    if
    :: granted ->
        if :: found -> entry_del(p); lrem(p) :: else fi;
        f = now * S;
        if :: hexists && hfence >= f -> f = hfence + 1 :: else fi;
        fence_ok = (f > last_fence);
        assert(fence_ok);
        last_fence = f;
        if :: !hexists -> hexists = true; hexp = NOEXP :: else fi;
        hfence = f;
        zx = (used != 0); /* the holdings' key exists */
        hs[p] = now + TTL;
        if
        :: want[p] > 1 ->
            exists_weights();
            if :: !y -> hwexp = NOEXP :: else fi;
            hw[p] = want[p];
            if :: hwexp == NOEXP || hwexp - now < TTL -> hwexp = now + TTL :: else fi
        :: else
        fi;
        if
        :: !zx -> hsexp = now + TTL
        :: else -> if :: hsexp < now + TTL -> hsexp = now + TTL :: else fi
        fi;
        keep_hash(TTL, fresh)
    :: else -> /* queued */
        if :: qdl[p] == 0 -> exists_entries(); if :: !hx -> qdexp = NOEXP :: else fi :: else fi;
        x = (qdl[p] == 0); /* a new field */
        qdl[p] = now + QLIFE;
        qwoken[p] = false;
        if
        :: x -> if :: qlen == 0 -> qexp = NOEXP :: else fi; q[qlen] = p; qlen++
        :: else
        fi;
        if :: qlen > 0 -> qexp = now + QLIFE :: else fi;
        qdexp = now + QLIFE;
        if :: fresh -> hexists = true; hexp = NOEXP :: else fi;
        keep_hash(QLIFE, fresh)
    fi
}

/* Release (leaving: ARGV[4] "1", a waiting call given up). */
inline release(p, leaving) {
    if
    :: leaving && qdl[p] != 0 -> entry_del(p); lrem(p)
    :: else
    fi;
    if
    :: hs[p] != 0 ->
        hs[p] = 0;
        exists_holdings();
        if :: !zx -> hsexp = 0 :: else fi;
        if :: want[p] != 1 -> weight_del(p) :: else fi
    :: else
    fi;
    /* wake() */
    if
    :: qlen > 0 ->
        held();
        nfree = CAP - used;
        walk(N, true)
    :: else
    fi
}

/* Extend: 1 when the holding is live; an expired one is removed with its weight. */
inline extend(p) {
    granted = false;
    if
    :: hs[p] != 0 && hs[p] <= now ->
        hs[p] = 0;
        exists_holdings();
        if :: !zx -> hsexp = 0 :: else fi;
        weight_del(p)
    :: hs[p] > now ->
        hs[p] = now + TTL;
        if :: hsexp < now + TTL -> hsexp = now + TTL :: else fi;
        if :: hexists && hexp != NOEXP && hexp < now + TTL -> hexp = now + TTL :: else fi;
        exists_weights();
        if :: y && hwexp != NOEXP && hwexp < now + TTL -> hwexp = now + TTL :: else fi;
        granted = true
    :: else
    fi
}

inline say(what, p) {
    printf("t=%d p%d %e: fence %d hash exp %d; holdings", now, p, what, hfence, hexp);
    i = 0;
    do :: i < N -> if :: hs[i] != 0 -> printf(" p%d(%d)", i, hs[i]) :: else fi; i++
    :: else -> break od;
    printf("; queue");
    i = 0;
    do :: i < qlen -> printf(" p%d(%d%d)", q[i], qdl[q[i]], qwoken[q[i]]); i++
    :: else -> break od;
    printf("\n")
}

inline clear_scratch() {
    i = 0; j = 0; x = 0; y = 0; f = 0; used = 0; nfree = 0; ahead = 0; qa = 0
}

proctype client(byte p) {
end:
    do
    :: d_step {
        alive[p] && (st[p] == IDLE || st[p] == WAIT) ->
        fits_ahead(p);
        acquire(p);
        if
        :: granted ->
            fifo_ok = fits;
            assert(fifo_ok);
            st[p] = HOLD;
#ifdef DRIFT_BROKEN
            ldl[p] = now + TTL + 1;
#else
            ldl[p] = now + TTL;
#endif
            say(is_granted, p)
        :: else -> st[p] = WAIT; say(waits, p)
        fi;
        check_state();
        clear_scratch()
    }
    :: d_step {
        alive[p] && st[p] == WAIT ->
        release(p, true);
        st[p] = DONE;
        say(leaves, p);
        check_state();
        clear_scratch()
    }
    :: d_step {
        alive[p] && st[p] == HOLD ->
        release(p, false);
        st[p] = DONE;
        ldl[p] = 0;
        say(releases, p);
        check_state();
        clear_scratch()
    }
    :: d_step {
        alive[p] && st[p] == HOLD && now < ldl[p] ->
        extend(p);
        if
        :: granted ->
#ifdef DRIFT_BROKEN
            ldl[p] = now + TTL + 1;
#else
            ldl[p] = now + TTL;
#endif
            say(renews, p)
        :: else -> st[p] = DONE; ldl[p] = 0; say(lost, p)
        fi;
        check_state();
        clear_scratch()
    }
    :: d_step {
        alive[p] && ndead < MAXDEAD ->
        ndead++;
        alive[p] = false;
        st[p] = DONE;
        ldl[p] = 0;
        say(dies, p);
        check_state()
    }
    od
}

active proctype clock() {
end:
    do
    :: d_step {
        now < TMAX ->
        now++;
        if :: hexists && hexp < now -> hexists = false; hfence = 0; hexp = 0 :: else fi;
        exists_holdings();
        if :: zx && hsexp < now ->
            i = 0; do :: i < N -> hs[i] = 0; i++ :: else -> break od; hsexp = 0
        :: else fi;
        exists_weights();
        if :: y && hwexp < now ->
            i = 0; do :: i < N -> hw[i] = 0; i++ :: else -> break od; hwexp = 0
        :: else fi;
        if :: qlen > 0 && qexp < now ->
            i = 0; do :: i < N -> q[i] = 0; i++ :: else -> break od; qlen = 0; qexp = 0
        :: else fi;
        exists_entries();
        if :: hx && qdexp < now ->
            i = 0; do :: i < N -> qdl[i] = 0; qwoken[i] = false; i++ :: else -> break od;
            qdexp = 0
        :: else fi;
        say(tick, 0);
        check_state();
        clear_scratch()
    }
    od
}

init {
    atomic {
        i = 0;
        do
        :: i < N -> alive[i] = true; want[i] = 1; i++
        :: else -> break
        od;
        want[0] = CAP;
        i = 0;
        do
        :: i < N -> run client(i); i++
        :: else -> break
        od;
        i = 0
    }
}
