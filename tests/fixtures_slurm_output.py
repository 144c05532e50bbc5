"""Text captured from the test cluster's Slurm 22.05 (lib/slurm/cluster.sh: one node `localhost`, 2
cores, Gres=gpu:8, in partitions gpu and spot), for the parser tests of tests/test_slurm_reservations.py.

Captured on 2026-12-03 at about 13:48 UTC with TZ=UTC unless said otherwise, after

    scontrol create reservation reservationname=maint1 starttime=now+1hour duration=60 flags=maint nodes=ALL users=root
    ... acct1  starttime=now+5hour duration=2:00:00 partitionname=spot nodes=localhost accounts=vision flags=ignore_jobs
    ... acct2  starttime=2026-12-04T10:00:00 endtime=2026-12-04T12:30:00 nodes=localhost users=root,nobody
               flags=ignore_jobs,overlap
    ... cores1 starttime=now+2days duration=60 corecnt=1 nodes=localhost users=root
    ... unl    starttime=now+3days duration=UNLIMITED nodes=localhost users=root flags=overlap
    ... excl   starttime=now+5days duration=10 nodes=localhost users=-nobody flags=overlap
    ... daily1 starttime=now+10days duration=30 nodes=ALL users=root flags=maint,daily
    ... now1   starttime=now duration=5 nodes=localhost accounts=search flags=overlap,ignore_jobs
    ... part1  starttime=now+12days duration=30 nodecnt=1 partitionname=gpu users=root flags=overlap

(`tres=gres/gpu=2` was refused: "TRES type 'gres/gpu' not supported with reservations" in 22.05.)
"""

# sinfo --noheader --Node --format '%N|%R|%G|%c|%Z|%T' (while now1 was active: state "reserved")
SINFO = """\
localhost|gpu|gpu:8|2|1|reserved
localhost|spot|gpu:8|2|1|reserved
"""

# scontrol show reservation --oneliner (verbatim: one long line per reservation)
RESERVATIONS = """\
ReservationName=maint1 StartTime=2026-12-03T14:43:55 EndTime=2026-12-03T15:43:55 Duration=01:00:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES,ALL_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=acct1 StartTime=2026-12-03T18:43:59 EndTime=2026-12-03T20:43:59 Duration=02:00:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=spot Flags=IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=(null) Groups=(null) Accounts=vision Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=acct2 StartTime=2026-12-04T10:00:00 EndTime=2026-12-04T12:30:00 Duration=02:30:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=root,nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=cores1 StartTime=2026-12-05T13:44:11 EndTime=2026-12-05T14:44:11 Duration=01:00:00 Nodes=localhost NodeCnt=1 CoreCnt=1 Features=(null) PartitionName=gpu Flags=SPEC_NODES   NodeName=localhost CoreIDs=0 TRES=cpu=1 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=unl StartTime=2026-12-06T13:44:11 EndTime=2027-12-06T13:44:11 Duration=365-00:00:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=excl StartTime=2026-12-08T13:44:11 EndTime=2026-12-08T13:54:11 Duration=00:10:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,SPEC_NODES TRES=cpu=2 Users=-nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=daily1 StartTime=2026-12-13T13:47:35 EndTime=2026-12-13T14:17:35 Duration=00:30:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,DAILY,SPEC_NODES,ALL_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=now1 StartTime=2026-12-03T13:47:35 EndTime=2026-12-03T13:52:35 Duration=00:05:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=(null) Groups=(null) Accounts=search Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
ReservationName=part1 StartTime=2026-12-15T13:47:35 EndTime=2026-12-15T14:17:35 Duration=00:30:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=gpu Flags=OVERLAP TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
"""

# scontrol show reservation (without --oneliner: indented continuation lines)
RESERVATIONS_MULTILINE = """\
ReservationName=maint1 StartTime=2026-12-03T14:43:55 EndTime=2026-12-03T15:43:55 Duration=01:00:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES,ALL_NODES
   TRES=cpu=2
   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=acct1 StartTime=2026-12-03T18:43:59 EndTime=2026-12-03T20:43:59 Duration=02:00:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=spot Flags=IGNORE_JOBS,SPEC_NODES
   TRES=cpu=2
   Users=(null) Groups=(null) Accounts=vision Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=acct2 StartTime=2026-12-04T10:00:00 EndTime=2026-12-04T12:30:00 Duration=02:30:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,IGNORE_JOBS,SPEC_NODES
   TRES=cpu=2
   Users=root,nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=cores1 StartTime=2026-12-05T13:44:11 EndTime=2026-12-05T14:44:11 Duration=01:00:00
   Nodes=localhost NodeCnt=1 CoreCnt=1 Features=(null) PartitionName=gpu Flags=SPEC_NODES
     NodeName=localhost CoreIDs=0
   TRES=cpu=1
   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=unl StartTime=2026-12-06T13:44:11 EndTime=2027-12-06T13:44:11 Duration=365-00:00:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,SPEC_NODES
   TRES=cpu=2
   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=excl StartTime=2026-12-08T13:44:11 EndTime=2026-12-08T13:54:11 Duration=00:10:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,SPEC_NODES
   TRES=cpu=2
   Users=-nobody Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=daily1 StartTime=2026-12-13T13:47:35 EndTime=2026-12-13T14:17:35 Duration=00:30:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,DAILY,SPEC_NODES,ALL_NODES
   TRES=cpu=2
   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=now1 StartTime=2026-12-03T13:47:35 EndTime=2026-12-03T13:52:35 Duration=00:05:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=OVERLAP,IGNORE_JOBS,SPEC_NODES
   TRES=cpu=2
   Users=(null) Groups=(null) Accounts=search Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

ReservationName=part1 StartTime=2026-12-15T13:47:35 EndTime=2026-12-15T14:17:35 Duration=00:30:00
   Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=gpu Flags=OVERLAP
   TRES=cpu=2
   Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a
   MaxStartDelay=(null)

"""

# TZ=Asia/Kolkata scontrol show reservation maint1 -o (the same reservation, in local time +05:30)
MAINT1_KOLKATA = """\
ReservationName=maint1 StartTime=2026-12-03T20:13:55 EndTime=2026-12-03T21:13:55 Duration=01:00:00 Nodes=localhost NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES,ALL_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)
"""

# scontrol show reservation --oneliner with none
NO_RESERVATIONS = "No reservations in the system\n"
