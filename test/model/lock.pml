/*
 * A model of the lock's server-side protocol (src/lock/store/lock_scripts.hpp) and of a process's
 * local hand-off (src/lock/mutex/cohort.cpp, acquire_policy.cpp), checked exhaustively by spin for
 * three processes and one name. See README.md for what is modelled and what is abstracted.
 *
 * Switches (spin -D...):
 *   FIFO_ON_LAPSE  the acquire script's absent-key branch hands the lock to the first live
 *                  queue entry when that is not the asker (issue 44, item 4). Without it: the
 *                  acquire script as it was, which grants an absent key to whoever asks.
 *   DRIFT_BROKEN   a mutation for the test of the checker itself: the process's local deadline
 *                  ends 2 ms after the key's expiry (the drift rule broken); mutual exclusion
 *                  must then fail.
 *
 * Every script runs in one d_step (Redis runs a script atomically, at one server time); the
 * properties are assertions, each with a variable named after it, so that a failure names it:
 *   excl_ok   never two processes holding leases that are valid (local deadline not reached)
 *             and were not ended by a forced unlock
 *   fence_ok  every fence given under the newest lease is larger than every fence given before
 *   stale_ok  only a lease ended by a forced unlock gives fences once a newer lease exists
 *   fifo_ok   a free or lapsed lock is granted only when no live queue entry of another
 *             process is ahead of the asker
 *   ttl_ok    every key that exists has an expiry
 *   outlive_ok the queue's keys expire no earlier than the deadlines of the entries they hold
 */

#ifndef N
#define N 3
#endif
#ifndef TMAX
#define TMAX 6
#endif
#define TTL 3     /* the lease's ttl, in ticks (ms) */
#define CLAIM 1   /* a hand-off's claim */
#define QLIFE 2   /* a queue entry's lifetime */
#define QUAR 1    /* the forced unlock's quarantine */
#define S 2       /* fence units (the server's microseconds) per tick */
#define NOEXP 255 /* no expiry (a key made by RPUSH or HSET before its PEXPIRE) */
#define NO 255    /* no entry, no owner */

/* The lock key's states. */
mtype = {ABSENT, FREE, HANDED, HELD} /* none, "F <fence>", "R <fence> <owner>", "H ..." */
/* The steps, as a trail (spin -t) shows them. */
mtype = {is_granted, waits, leaves, hands_locally, releases, renews, hears_forced, dies,
         forced_unlock, tick}
#define DASH N    /* the owner "-" of "R <fence> -" after a forced unlock */

/* A process's states. */
#define IDLE 0
#define WAIT 1
#define HOLD 2

byte now = 1; /* the server's clock; 1, not 0: a missing deadline reads as 0, "lapsed" */

/* p{name} */
mtype kkind = ABSENT;
byte kfence;
byte kowner;
byte ktok;
byte kqueued;
byte kexp;
/* p{name}:q, a list of processes; room for each twice (the scripts can queue one twice, see
 * README.md) */
#define QCAP (2 * N)
byte q[QCAP];
byte qlen;
byte qexp;
/* p{name}:qd, each queued process's deadline (NO: no field) */
byte qd[N];
byte qdexp;

/* The processes (lockers). demand: its local calls not yet served. */
bool alive[N];
byte demand[N];
byte st[N];
byte tok[N];    /* the lease's token */
byte lfence[N]; /* the lease's fence */
byte cur[N];    /* the fence of the process's current holder (the last it gave) */
byte ldl[N];    /* the lease's local deadline, in server time */
byte gat[N];    /* when the grant's reply came */

/* Ghosts. */
byte ntok;       /* the last token given */
byte newest;     /* the newest lease's token */
byte last_fence; /* the largest fence given under the newest lease, or before it */
byte forced_tok; /* the token of the lease a forced unlock ended */
bool force_done;
byte ndead;
#ifndef MAXDEAD
#define MAXDEAD 1
#endif

/* Scratch, out of the state vector: set before use within one d_step. */
hidden byte i, j, x, h, f, y, d, dleft, qa, quar;
hidden byte hx, hnew, hdeleted, handed, granted, qx;
hidden byte nodup_ok, excl_ok, fence_ok, stale_ok, fifo_ok, ttl_ok, outlive_ok;

/* --- Redis commands on the queue's keys --- */

inline hash_exists() {
    hx = false;
    i = 0;
    do
    :: i < N -> if :: qd[i] != NO -> hx = true :: else fi; i++
    :: else -> break
    od
}

inline hset(p, v) {
    hash_exists();
    if :: !hx -> qdexp = NOEXP :: else fi;
    hnew = (qd[p] == NO);
    qd[p] = v
}

inline hdel(p) {
    hdeleted = (qd[p] != NO);
    qd[p] = NO;
    hash_exists();
    if :: !hx -> qdexp = 0 :: else fi
}

inline rpush(p) {
    assert(qlen < QCAP);
    if :: qlen == 0 -> qexp = NOEXP :: else fi;
    q[qlen] = p;
    qlen++
}

/* x: the first entry, removed */
inline lpop() {
    x = q[0];
    j = 0;
    do
    :: j + 1 < qlen -> q[j] = q[j + 1]; j++
    :: else -> break
    od;
    qlen--;
    q[qlen] = 0;
    if :: qlen == 0 -> qexp = 0 :: else fi
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

/* --- the properties --- */

inline check_fifo(p) {
    fifo_ok = true;
    j = 0;
    do
    :: j < qlen && q[j] == p -> break
    :: j < qlen && q[j] != p ->
        if :: qd[q[j]] != NO && qd[q[j]] >= now -> fifo_ok = false :: else fi;
        j++
    :: else -> break
    od;
    assert(fifo_ok)
}

inline check_state() {
    y = 0;
    i = 0;
    do
    :: i < N ->
        if :: alive[i] && st[i] == HOLD && tok[i] != forced_tok && now < ldl[i] -> y++ :: else fi;
        i++
    :: else -> break
    od;
    excl_ok = (y <= 1);
    assert(excl_ok);
    hash_exists();
    ttl_ok = (kkind == ABSENT || kexp != NOEXP) && (qlen == 0 || qexp != NOEXP) &&
             (!hx || qdexp != NOEXP);
    assert(ttl_ok);
    outlive_ok = true;
    i = 0;
    do
    :: i < N ->
        if :: qd[i] != NO && qd[i] > qdexp -> outlive_ok = false :: else fi;
        i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < qlen ->
        if :: qd[q[i]] != NO && qd[q[i]] > qexp -> outlive_ok = false :: else fi;
        i++
    :: else -> break
    od;
    assert(outlive_ok);
#ifdef CHECK_NODUP
    nodup_ok = true;
    i = 0;
    do
    :: i < qlen ->
        j = i + 1;
        do
        :: j < qlen -> if :: q[j] == q[i] -> nodup_ok = false :: else fi; j++
        :: else -> break
        od;
        i++
    :: else -> break
    od;
    assert(nodup_ok)
#endif
}

/* A fence given to a holder in process p, under its lease. */
inline give_fence(p, fence) {
    if
    :: tok[p] == newest ->
        fence_ok = (fence > last_fence);
        assert(fence_ok);
        last_fence = fence
    :: else ->
        stale_ok = (tok[p] == forced_tok);
        assert(stale_ok)
    fi
}

/* --- the acquire script (ARGV[4] = qa: 1 queue when held, 2 also keep queued on a grant) --- */

inline enqueue(p) {
    hset(p, now + QLIFE);
    if :: hnew -> rpush(p) :: else fi;
    if :: qlen > 0 -> qexp = now + QLIFE :: else fi;
    qdexp = now + QLIFE
}

inline grant(p, fence, queue_may_exist) {
    f = fence;
    if :: qa == 2 -> enqueue(p) :: else fi;
    y = 0;
    if
    :: queue_may_exist ->
        x = qlen;
        if :: qa == 2 && x > 0 -> x-- :: else fi;
        if
        :: x > 0 -> y = 2
        :: else -> if :: qa == 2 -> y = 1 :: else fi
        fi
    :: else -> if :: qa == 2 -> y = 1 :: else fi
    fi;
    ntok++;
    kkind = HELD;
    kfence = f;
    kowner = p;
    ktok = ntok;
    kqueued = y;
    kexp = now + TTL;
    granted = true
}

/* The release script's grant_to: "R <fence> <owner>" for the claim, and "g" to it (not
 * modelled: a waiter asks again whenever it likes, which a "g" only makes sooner). */
inline grant_to(fence, o) {
    hdel(o);
    kfence = fence;
    kkind = HANDED;
    kowner = o;
    ktok = 0;
    kqueued = 0;
    kexp = now + CLAIM
}

/* The release script's hand_off: to the first live entry, the releasing process's own entry
 * behind the others. handed: whether it found one. */
inline hand_off(fence, rel) {
    d = NO;
    dleft = 0;
    handed = false;
    do
    :: qlen == 0 -> break
    :: else ->
        lpop();
        if
        :: qd[x] == NO || qd[x] < now -> hdel(x)
        :: else ->
            if
            :: x == rel && d == NO -> d = x; dleft = qd[x] - now + 1
            :: else ->
                if
                :: d != NO ->
                    rpush(d);
                    if :: qexp == NOEXP || qexp - now < dleft -> qexp = now + dleft :: else fi
                :: else
                fi;
                grant_to(fence, x);
                handed = true;
                break
            fi
        fi
    od;
    if :: !handed && d != NO -> grant_to(fence, d); handed = true :: else fi
}

inline acquire(p) {
    granted = false;
    if
    :: kkind == FREE && qa != 2 -> /* the uncontended path */
        check_fifo(p);
        f = kfence + 1;
        ntok++;
        kkind = HELD;
        kfence = f;
        kowner = p;
        ktok = ntok;
        kqueued = 0;
        kexp = now + TTL;
        granted = true
    :: kkind == FREE && qa == 2 ->
        check_fifo(p);
        grant(p, kfence + 1, false)
    :: kkind == ABSENT ->
        qx = (qlen > 0);
#ifdef FIFO_ON_LAPSE
        /* The entries ahead of the asker are popped until a live one, which is handed the lock
         * as the release script's hand_off does; the asker is queued behind it. An asker at the
         * head (or a queue of lapsed entries) is granted. */
        handed = false;
        do
        :: qlen == 0 || q[0] == p -> break
        :: else ->
            lpop();
            h = x;
            y = (qd[h] != NO && qd[h] >= now);
            hdel(h);
            if
            :: y -> grant_to(now * S, h); enqueue(p); handed = true; break
            :: else
            fi
        od;
        if
        :: !handed ->
            check_fifo(p);
            if :: qx -> hdel(p); if :: hdeleted -> lrem(p) :: else fi :: else fi;
            grant(p, now * S, qx)
        :: else
        fi
#else
        check_fifo(p);
        if :: qx -> hdel(p); if :: hdeleted -> lrem(p) :: else fi :: else fi;
        grant(p, now * S, qx)
#endif
    :: kkind == HANDED ->
        if
        :: kowner == p -> grant(p, kfence + 1, true)
        :: else -> enqueue(p)
        fi
    :: kkind == HELD -> /* another lease's token: a process asks only while it holds none */
        enqueue(p);
        if
        :: kowner != p -> kqueued = 2
        :: else -> if :: kqueued == 0 -> kqueued = 1 :: else fi
        fi
    fi
}

/* --- the release script: the holder's token, its last fence --- */

inline release(p) {
    if
    :: kkind == HELD && ktok == tok[p] ->
        f = kfence;
#ifndef FENCE_BROKEN
        if :: cur[p] > f -> f = cur[p] :: else fi;
#endif
        handed = false;
        if :: kqueued != 0 -> hand_off(f, p) :: else fi;
        if
        :: !handed -> kkind = FREE; kfence = f; kowner = 0; ktok = 0; kqueued = 0 /* KEEPTTL */
        :: else
        fi
    :: else
    fi
}

/* The release script with ARGV[1] "": process p leaves the queue. */
inline leave(p) {
    hdel(p);
    if :: hdeleted -> lrem(p) :: else fi;
    if
    :: kkind == HANDED && kowner == p ->
        hand_off(kfence, NO);
        if :: !handed -> kkind = FREE; kowner = 0 /* KEEPTTL */ :: else fi
    :: else
    fi
}

/* The extend script: the holder's token and its fence. */
inline extend(p) {
    if
    :: kkind == HELD && ktok == tok[p] ->
        kexp = now + TTL;
        if :: cur[p] > kfence -> kfence = cur[p] :: else fi;
#ifdef DRIFT_BROKEN
        ldl[p] = now + TTL + 2
#else
        ldl[p] = now + TTL
#endif
    :: else -> /* lost */
        st[p] = IDLE; tok[p] = 0; lfence[p] = 0; cur[p] = 0; ldl[p] = 0; gat[p] = 0
    fi
}

inline drop_lease(p) {
    st[p] = IDLE; tok[p] = 0; lfence[p] = 0; cur[p] = 0; ldl[p] = 0; gat[p] = 0
}

/* What a trail shows (spin -t): pan does not print. */
inline say(what, p) {
    printf("t=%d p%d %e: key %e fence %d owner %d tok %d queued %d exp %d; q", now, p, what,
           kkind, kfence, kowner, ktok, kqueued, kexp);
    i = 0;
    do :: i < qlen -> printf(" p%d(%d)", q[i], qd[q[i]]); i++ :: else -> break od;
    printf(" exp %d\n", qexp)
}

inline clear_scratch() {
    i = 0; j = 0; x = 0; h = 0; f = 0; y = 0; d = 0; dleft = 0; qa = 0; quar = 0
}

proctype client(byte p) {
end:
    do
    :: d_step { /* ask (or ask again: a poll, a "g", a queue entry's refresh) */
        alive[p] && st[p] != HOLD && demand[p] > 0 ->
        if :: demand[p] >= 2 -> qa = 2 :: else -> qa = 1 fi;
        acquire(p);
        if
        :: granted ->
            st[p] = HOLD;
            tok[p] = ktok;
            newest = ktok;
            lfence[p] = f;
            cur[p] = f;
#ifdef DRIFT_BROKEN
            ldl[p] = now + TTL + 2;
#else
            ldl[p] = now + TTL;
#endif
            gat[p] = now;
            demand[p]--;
            give_fence(p, f);
            say(is_granted, p)
        :: else -> st[p] = WAIT; say(waits, p)
        fi;
        check_state();
        clear_scratch()
    }
    :: d_step { /* its waiters give up: it leaves the queue */
        alive[p] && st[p] == WAIT ->
        leave(p);
        demand[p] = 0;
        st[p] = IDLE;
        say(leaves, p);
        check_state();
        clear_scratch()
    }
    :: d_step { /* the holder lets go to the next waiter of this process */
        alive[p] && st[p] == HOLD && demand[p] > 0 && now + 1 < ldl[p] &&
        cur[p] + 1 - lfence[p] <= (now - gat[p]) * S ->
        cur[p]++;
        demand[p]--;
        give_fence(p, cur[p]);
        say(hands_locally, p);
        check_state();
        clear_scratch()
    }
    :: d_step { /* the holder gives the lease back (also after it ran out locally) */
        alive[p] && st[p] == HOLD ->
        release(p);
        drop_lease(p);
        say(releases, p);
        check_state();
        clear_scratch()
    }
    :: d_step { /* renewal */
        alive[p] && st[p] == HOLD && now < ldl[p] ->
        extend(p);
        say(renews, p);
        check_state();
        clear_scratch()
    }
    :: d_step { /* told "f": a forced unlock ended the lease (the message may be lost: never) */
        alive[p] && st[p] == HOLD && tok[p] == forced_tok ->
        release(p);
        drop_lease(p);
        say(hears_forced, p);
        check_state();
        clear_scratch()
    }
    :: d_step { /* dies */
        alive[p] && ndead < MAXDEAD ->
        ndead++;
        alive[p] = false;
        demand[p] = 0;
        drop_lease(p);
        say(dies, p);
        check_state()
    }
    od
}

/* The forced unlock, at most once. */
active proctype operator() {
    if
    :: d_step {
        kkind == HELD ->
        force_done = true;
        quar = QUAR;
        if :: kexp - now < quar -> quar = kexp - now :: else fi;
        if :: quar < 1 -> quar = 1 :: else fi;
        forced_tok = ktok;
        kkind = HANDED;
        kowner = DASH;
        ktok = 0;
        kqueued = 0;
        kexp = now + quar;
        say(forced_unlock, forced_tok);
        check_state();
        clear_scratch()
    }
    :: skip
    fi
}

/* The server's clock: keys lapse once it is past their expiry (Redis: now > when). */
active proctype clock() {
end:
    do
    :: d_step {
        now < TMAX ->
        now++;
        if :: kkind != ABSENT && kexp < now ->
            kkind = ABSENT; kfence = 0; kowner = 0; ktok = 0; kqueued = 0; kexp = 0
        :: else fi;
        if :: qlen > 0 && qexp < now ->
            i = 0;
            do :: i < QCAP -> q[i] = 0; i++ :: else -> break od;
            qlen = 0; qexp = 0
        :: else fi;
        hash_exists();
        if :: hx && qdexp < now ->
            i = 0;
            do :: i < N -> qd[i] = NO; i++ :: else -> break od;
            qdexp = 0
        :: else fi;
        say(tick, 0);
        check_state();
        clear_scratch()
    }
    od
}

init {
    d_step {
        i = 0;
        do
        :: i < N -> alive[i] = true; qd[i] = NO; demand[i] = 1; i++
        :: else -> break
        od;
        demand[0] = 2;
        i = 0
    };
    atomic {
        i = 0;
        do
        :: i < N -> run client(i); i++
        :: else -> break
        od;
        i = 0
    }
}
