# The PGXN distribution (make dist, scripts/dist): an archive made with
# git archive, hoplock-VERSION.zip, everything under hoplock-VERSION/, of
# the committed tree or (--worktree) of the working tree as it is; a
# META.json unfit for PGXN is refused, with the reason, and no archive is
# built. Then Debian's pgxnclient installs the archive (`pgxn install
# ./hoplock-VERSION.zip`: it unpacks, builds with PGXS and installs) and a
# server started from that installation runs CREATE EXTENSION from what it
# installed.
#
# The tests run as an ordinary OS user, who cannot write into the system's
# PostgreSQL installation; so pgxn installs into a private copy of it (its
# programs, libraries and share directory), which PostgreSQL finds its
# files relative to, as it does when an installation is moved: pgxn is
# given that copy's pg_config, exactly as `pgxn install --pg_config` is used
# for a PostgreSQL that is not the first on PATH. The copy holds no hoplock
# before: whatever the server loads then came from the archive.
#
# The tree is copied into a scratch git repository first (the tests may run
# in a copy without .git, and the working-tree checks change files).
use strict;
use warnings;
use Cwd qw(getcwd);
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub which
{
	my ($prog) = @_;
	foreach my $dir (split /:/, $ENV{PATH})
	{
		return "$dir/$prog" if -x "$dir/$prog";
	}
	return undef;
}

# Run a command; returns (success, stdout, stderr).
sub run
{
	my ($cmd, %opt) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %{ $opt{env} // {} });
	delete $ENV{$_} foreach grep { !defined $ENV{$_} } keys %ENV;
	my $ok = IPC::Run::run($cmd, '>', \$out, '2>', \$err,
		(defined $opt{dir} ? (init => sub { chdir $opt{dir} or die "chdir $opt{dir}: $!" }) : ()));
	return ($ok, $out, $err);
}

foreach my $prog ('git', 'pgxn', 'python3')
{
	next if which($prog);
	fail("$prog is installed (scripts/deps installs git and pgxnclient, which brings python3)");
	done_testing();
	exit 0;
}

my $tmp = PostgreSQL::Test::Utils::tempdir();
my %git_env = (
	HOME => $tmp, GIT_CONFIG_NOSYSTEM => 1,
	GIT_AUTHOR_NAME => 'test', GIT_AUTHOR_EMAIL => 'test@localhost',
	GIT_COMMITTER_NAME => 'test', GIT_COMMITTER_EMAIL => 'test@localhost');
sub git
{
	my ($ok, $out, $err) = run([ 'git', '-C', "$tmp/src", @_ ], env => \%git_env);
	die "git @_: $err" unless $ok;
	chomp $out;
	return $out;
}

# --- a repository of the tree ---------------------------------------------------------
make_path("$tmp/src");
my ($tar_ok, undef, $tar_err) = run([ 'sh', '-c',
	'tar -C "$1" --exclude=./.git --exclude="./tmp_check*" --exclude=./results --exclude=./output_iso '
	  . '--exclude=./log --exclude=./logs -cf - . | tar -C "$2" -xf -', 'sh', getcwd(), "$tmp/src" ]);
die "copying the tree: $tar_err" unless $tar_ok;
git('init', '-q');
git('add', '-A');
git('commit', '-q', '-m', 'the tree under test');
my $head = git('rev-parse', 'HEAD');

my $meta_text = slurp_file("$tmp/src/META.json");
my $meta = decode_json($meta_text);
my $version = $meta->{version};
my $name = "hoplock-$version";

sub dist
{
	my ($outdir, @args) = @_;
	make_path($outdir);
	return run([ "$tmp/src/scripts/dist", @args, '-o', $outdir ], env => \%git_env);
}

# The members of a zip archive, one a line.
sub zip_names
{
	my ($zip) = @_;
	my ($ok, $out, $err) = run([ 'python3', '-c',
		'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))', $zip ]);
	die "reading $zip: $err" unless $ok;
	return [ sort grep { $_ ne '' } split /\n/, $out ];
}

sub zip_member
{
	my ($zip, $member) = @_;
	my ($ok, $out, $err) = run([ 'python3', '-c',
		'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))',
		$zip, $member ]);
	return $ok ? $out : undef;
}

# --- the committed tree ----------------------------------------------------------------
my ($ok, $out, $err) = dist("$tmp/out");
ok($ok, 'scripts/dist builds an archive of the committed tree') or diag($err);
my $zip = "$tmp/out/$name.zip";
my $built = $ok && -f $zip;
SKIP:
{
	skip 'no archive was built', 4 unless $built;
	is((split /\n/, $out)[-1], $zip, 'the last line printed is the archive\'s path, hoplock-VERSION.zip');
	my @files = map { "$name/$_" } split /\n/, git('ls-files');
	my @in_zip = grep { !m{/$} } @{ zip_names($zip) };
	is_deeply(\@in_zip, [ sort @files ],
		"it holds every file of the tree, each under $name/, and nothing else");
	is(zip_member($zip, "$name/META.json"), $meta_text, 'META.json in it is the tree\'s');
	ok(!grep({ m{^\Q$name\E/(?:.*/)?(?:[^/]+\.o|[^/]+\.so|tmp_check)(?:/|$)} } @in_zip),
		'no build products in it');
}

# --- the working tree --------------------------------------------------------------------
my $script = "$tmp/src/hoplock--$version.sql";
append_to_file($script, "-- MARKER: not committed\n");
append_to_file("$tmp/src/NEW-FILE", "a file not yet added\n");
my $status = git('status', '--porcelain');
($ok, $out, $err) = dist("$tmp/worktree", '--worktree');
ok($ok, 'scripts/dist --worktree builds an archive of the working tree') or diag($err);
SKIP:
{
	skip 'no archive was built', 2 unless $ok;
	like(zip_member("$tmp/worktree/$name.zip", "$name/hoplock--$version.sql") // '',
		qr/-- MARKER: not committed\n\z/, 'it has the uncommitted change');
	ok((grep { $_ eq "$name/NEW-FILE" } @{ zip_names("$tmp/worktree/$name.zip") }),
		'and the new file');
}
is(git('status', '--porcelain'), $status, 'the index and the working tree are as they were');
is(git('rev-parse', 'HEAD'), $head, 'HEAD too');
is(git('stash', 'list'), '', 'and nothing was stashed');
($ok, $out, $err) = dist("$tmp/head");
SKIP:
{
	skip 'no archive was built', 3 unless $ok;
	unlike(zip_member("$tmp/head/$name.zip", "$name/hoplock--$version.sql") // '',
		qr/MARKER: not committed/, 'without --worktree the uncommitted change is left out');
	ok(!(grep { $_ eq "$name/NEW-FILE" } @{ zip_names("$tmp/head/$name.zip") }),
		'and so is the new file');
	like($err, qr/uncommitted changes are not in the archive/, 'with a note saying so');
}
git('checkout', '-q', '--', '.');
unlink "$tmp/src/NEW-FILE";

# Without -o the archive is written at the top of the repository; left
# there, it is not put into the next one.
($ok, $out, $err) = run([ "$tmp/src/scripts/dist" ], env => \%git_env);
SKIP:
{
	skip 'no archive was built', 3 unless $ok;
	ok(-f "$tmp/src/$name.zip", 'without -o the archive is written at the top of the repository');
	($ok, $out, $err) = dist("$tmp/again", '--worktree');
	ok($ok && !grep({ /\.zip$/ } @{ zip_names("$tmp/again/$name.zip") }),
		'an archive left there is not put into the next one');
	($ok, $out, $err) = dist("$tmp/again-head");
	ok($ok && $err !~ /uncommitted changes/, 'nor taken for an uncommitted change')
	  or diag($err);
	unlink "$tmp/src/$name.zip";
}

# --- META.json unfit for PGXN: refused, with the reason --------------------------------------
my $control_text = slurp_file("$tmp/src/hoplock.control");
my @bad = (
	[ 'invalid JSON', sub { substr($_[0], -3) = '' }, qr/META\.json: not valid JSON/ ],
	[ 'no resources', sub { $_[0] = encode(without($_[0], 'resources')) },
		qr/the required key "resources" is missing/ ],
	[ 'no bug tracker', sub { my $m = decode_json($_[0]); $m->{resources} = { repository => { url => 'https://example.org/x.git', type => 'git' } }; $_[0] = encode($m) },
		qr/resources\.bugtracker is missing/ ],
	[ 'no repository', sub { my $m = decode_json($_[0]); $m->{resources} = { bugtracker => { web => 'https://example.org/issues' } }; $_[0] = encode($m) },
		qr/resources\.repository is missing/ ],
	[ 'a repository without URL', sub { my $m = decode_json($_[0]); $m->{resources} = { bugtracker => { web => 'https://example.org/issues' }, repository => { type => 'git' } }; $_[0] = encode($m) },
		qr/resources\.repository needs "url" or "web"/ ],
	[ 'no license', sub { $_[0] = encode(without($_[0], 'license')) },
		qr/the required key "license" is missing/ ],
	[ 'an unknown license', sub { my $m = decode_json($_[0]); $m->{license} = 'whatever'; $_[0] = encode($m) },
		qr/"license" "whatever" is not one PGXN knows/ ],
	[ 'no maintainer', sub { $_[0] = encode(without($_[0], 'maintainer')) },
		qr/the required key "maintainer" is missing/ ],
	[ 'another meta-spec', sub { my $m = decode_json($_[0]); $m->{'meta-spec'}{version} = '2.0.0'; $_[0] = encode($m) },
		qr/meta-spec version is "2\.0\.0"/ ],
	[ 'another name', sub { my $m = decode_json($_[0]); $m->{name} = 'hoplock2'; $_[0] = encode($m) },
		qr/"name" is "hoplock2", but the control file is hoplock\.control/ ],
	[ 'a version not the control file\'s', sub { my $m = decode_json($_[0]); $m->{version} = '9.9.9'; $_[0] = encode($m) },
		qr/"version" is 9\.9\.9, but the control file's default_version is \Q$version\E/ ],
	[ 'a version that is not semantic', sub { my $m = decode_json($_[0]); $m->{version} = '1.1'; $_[0] = encode($m) },
		qr/"version" must be a semantic version/ ],
	[ 'provides without the extension', sub { my $m = decode_json($_[0]); $m->{provides} = { other => $m->{provides}{hoplock} }; $_[0] = encode($m) },
		qr/"provides" does not name the extension hoplock/ ],
	[ 'a provided version not the control file\'s', sub { my $m = decode_json($_[0]); $m->{provides}{hoplock}{version} = '1.0.0'; $_[0] = encode($m) },
		qr/provides\.hoplock\.version is 1\.0\.0, but the control file's default_version is \Q$version\E/ ],
	[ 'a provided file not the default version\'s', sub { my $m = decode_json($_[0]); $m->{provides}{hoplock}{file} = 'hoplock--1.0.0.sql'; $_[0] = encode($m) },
		qr/provides\.hoplock\.file is hoplock--1\.0\.0\.sql, but the install script of default_version/ ],
	[ 'a provided file not in the distribution', sub { my $m = decode_json($_[0]); $m->{provides}{hoplock}{docfile} = 'doc/missing.md'; $_[0] = encode($m) },
		qr/provides\.hoplock\.docfile "doc\/missing\.md" is not in the distribution/ ],
);
sub encode { return JSON::PP->new->pretty->canonical->encode($_[0]) }
sub without { my $m = decode_json($_[0]); delete $m->{ $_[1] }; return $m }

foreach my $case (@bad)
{
	my ($what, $change, $expect) = @$case;
	my $text = $meta_text;
	$change->($text);
	open my $fh, '>', "$tmp/src/META.json" or die $!;
	print $fh $text;
	close $fh;
	my $outdir = "$tmp/bad-" . ($what =~ s/\W+/-/gr);
	($ok, $out, $err) = dist($outdir, '--worktree');
	ok(!$ok && $err =~ $expect && !-e "$outdir/$name.zip" && !glob("$outdir/*.zip"),
		"a META.json with $what is refused, saying why, and no archive is built")
	  or diag("exit " . ($ok ? 0 : 'non-zero') . ", stderr:\n$err");
}
open my $mfh, '>', "$tmp/src/META.json" or die $!;
print $mfh $meta_text;
close $mfh;
open my $cfh, '>', "$tmp/src/hoplock.control" or die $!;
print $cfh $control_text =~ s/^default_version\s*=.*$/default_version = '9.9.9'/mr;
close $cfh;
($ok, $out, $err) = dist("$tmp/bad-control", '--worktree');
ok(!$ok && $err =~ /"version" is \Q$version\E, but the control file's default_version is 9\.9\.9/,
	'a control file whose default_version META.json does not carry is refused too')
  or diag($err);
git('checkout', '-q', '--', '.');

# --- pgxn install ------------------------------------------------------------------------------
SKIP:
{
	skip 'no archive to install: scripts/dist failed on the tree', 14 unless $built;

	# A private copy of the PostgreSQL installation, the same layout under
	# another prefix: its programs, its libraries but hoplock's, its share
	# directory but hoplock's; headers and PGXS linked.
	my %pg;
	foreach my $dir (qw(bindir pkglibdir sharedir libdir includedir includedir-server pgxs))
	{
		my ($k, $v) = (undef, '');
		($ok, $v) = run([ 'pg_config', "--$dir" ]);
		die "pg_config --$dir failed" unless $ok;
		chomp $v;
		$pg{$dir} = $v;
	}
	$pg{pgxs} = dirname(dirname(dirname($pg{pgxs})));    # .../pgxs/src/makefiles/pgxs.mk
	my $prefix = $pg{bindir};
	foreach my $p (values %pg)
	{
		chop $prefix while $prefix ne '' && index("$p/", "$prefix/") != 0;
		$prefix =~ s{/+$}{};
	}
	my $root = "$tmp/pg";
	my %to = map { $_ => $root . substr($pg{$_}, length $prefix) } keys %pg;
	make_path($to{bindir}, $to{pkglibdir}, $to{libdir}, dirname($to{sharedir}), dirname($to{includedir}));
	my ($cp_ok, undef, $cp_err) = run([ 'cp', '-a', "$pg{bindir}/.", $to{bindir} ]);
	($cp_ok, undef, $cp_err) = run([ 'cp', '-a', $pg{sharedir}, dirname($to{sharedir}) ]) if $cp_ok;
	die "copying the installation: $cp_err" unless $cp_ok;
	unlink glob("$to{sharedir}/extension/hoplock*");
	foreach my $so (glob "$pg{pkglibdir}/*.so")
	{
		next if $so =~ m{/hoplock\.so$};
		copy($so, $to{pkglibdir}) or die "copy $so: $!";
	}
	symlink($pg{includedir}, $to{includedir}) or die "symlink: $!";
	if (!-e $to{'includedir-server'})
	{
		make_path(dirname($to{'includedir-server'}));
		symlink($pg{'includedir-server'}, $to{'includedir-server'}) or die "symlink: $!";
	}
	if (!-e $to{pgxs})
	{
		make_path(dirname($to{pgxs}));
		symlink($pg{pgxs}, $to{pgxs}) or die "symlink: $!";
	}
	my $pg_config = "$to{bindir}/pg_config";
	my ($pc_ok, $libdir_there) = run([ $pg_config, '--pkglibdir' ]);
	chomp $libdir_there;
	is($libdir_there, $to{pkglibdir}, 'the copy of the installation finds its files in the copy')
	  or diag("prefix $prefix, copy $root");
	ok(!-e "$to{pkglibdir}/hoplock.so" && !glob("$to{sharedir}/extension/hoplock*"),
		'the copy holds no hoplock before');

	# pgxn runs make: not with the make flags of the make running these tests
	my $cpus = `getconf _NPROCESSORS_ONLN 2>/dev/null` || 1;
	chomp $cpus;
	my %make_env = (MAKEFLAGS => "-j$cpus", MFLAGS => undef, MAKELEVEL => undef, MAKEOVERRIDES => undef);
	my $t0 = time();
	($ok, $out, $err) = run([ 'pgxn', 'install', '--pg_config', $pg_config, "./$name.zip" ],
		dir => "$tmp/out", env => \%make_env);
	ok($ok, "pgxn install ./$name.zip builds and installs it")
	  or diag("stdout:\n" . substr($out, -3000) . "\nstderr:\n" . substr($err, -3000));
	diag(sprintf('pgxn install took %d s', time() - $t0));
	ok(-f "$to{pkglibdir}/hoplock.so", 'the library is installed');
	my @scripts = sort map { s{.*/}{}r } glob("$tmp/src/hoplock--*.sql");
	is_deeply([ sort map { s{.*/}{}r } glob("$to{sharedir}/extension/hoplock--*.sql") ], \@scripts,
		'every install and upgrade script is installed');
	is(join('', map { slurp_file("$to{sharedir}/extension/$_") } @scripts),
		join('', map { slurp_file("$tmp/src/$_") } @scripts), '... as they are in the tree');
	is(slurp_file("$to{sharedir}/extension/hoplock.control"), $control_text, 'and the control file');

	# A server of the copy, preloading what was installed.  (PostgreSQL 13's
	# PostgresNode has no install_path: it runs the programs PATH finds.)
	my $path = $ENV{PATH};
	my $node;
	if (PostgreSQL::Test::Cluster->can('install_path'))
	{
		$node = PostgreSQL::Test::Cluster->new('pgxn', install_path => dirname($to{bindir}));
	}
	else
	{
		$ENV{PATH} = "$to{bindir}:$path";
		$node = PostgreSQL::Test::Cluster->new('pgxn');
	}
	$node->init;
	$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'hoplock'
jit = off
});
	$node->start;
	is($node->safe_psql('postgres', q{SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'}),
		$to{pkglibdir}, 'the server is the copy\'s');
	is( $node->safe_psql('postgres', q{
			CREATE SCHEMA hoplock;
			CREATE EXTENSION hoplock SCHEMA hoplock;
			SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
		$version, "CREATE EXTENSION hoplock installs $version from what pgxn installed");
	is( $node->safe_psql('postgres', q{
			SELECT string_agg(version, ' ' ORDER BY version) FROM pg_available_extension_versions
			 WHERE name = 'hoplock'}),
		join(' ', sort map { /^hoplock--([^-]+)\.sql$/ ? $1 : () } @scripts),
		'every version of it is available');
	is( $node->safe_psql('postgres', q{
			SELECT path FROM pg_extension_update_paths('hoplock') WHERE source = '1.0.0' AND target = '1.2.0'}),
		'1.0.0--1.1.0--1.2.0', 'the upgrades from 1.0.0 and 1.1.0 are installed');
	# a first term: its generation minted on the first branch of the
	# fresh install (c above its floor, its tag), and held as granted
	my $granted = $node->safe_psql('postgres', q{
			SELECT owner || '/' || generation FROM hoplock.hoplock_acquire('pgxn', 'host-a', '1 h')});
	is( $node->safe_psql('postgres', q{
			SELECT h.owner || '/' || h.generation || ' ' || b.reason || ' '
			       || ((h.generation >> 11) >= b.floor AND (h.generation & 2047) = b.tag)
			  FROM hoplock.hoplock_holder('pgxn') AS h, hoplock_internal.branch AS b}),
		"$granted first true", 'it works: a first term');
	ok( $node->poll_query_until('postgres', q{
			SELECT pid IS NOT NULL FROM hoplock.hoplock_workers WHERE datname = 'postgres'}),
		'the preloaded library runs the expiry worker');
	$node->stop;
	$ENV{PATH} = $path;

	($ok, $out, $err) = run([ 'pgxn', 'uninstall', '--pg_config', $pg_config, "./$name.zip" ],
		dir => "$tmp/out", env => \%make_env);
	ok($ok && !-e "$to{pkglibdir}/hoplock.so" && !glob("$to{sharedir}/extension/hoplock*"),
		'pgxn uninstall removes it again')
	  or diag($err);
}

done_testing();
