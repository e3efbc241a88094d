# Packaging: META.json is valid PGXN meta-spec 1.0.0 and carries the control
# file's version; every install and upgrade script (at the top level, as
# contrib modules keep them) starts with the guard against being run outside
# CREATE EXTENSION, and the Makefile installs every one of them.
use strict;
use warnings;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $meta = decode_json(slurp_file('META.json'));
my ($control_version) = slurp_file('hoplock.control') =~ /^default_version\s*=\s*'([^']+)'/m;

ok(defined $control_version, 'the control file has a default_version');
is($meta->{version}, $control_version, 'META.json version equals the control file\'s');
is($meta->{provides}{hoplock}{version}, $control_version, 'so does provides.hoplock.version');
is($meta->{'meta-spec'}{version}, '1.0.0', 'meta-spec 1.0.0');
foreach my $key (qw(name abstract version maintainer license provides meta-spec))
{
	ok(exists $meta->{$key}, "META.json has the required key $key");
}
ok(-f $meta->{provides}{hoplock}{file}, 'provides.hoplock.file exists');
ok(-f "hoplock--$control_version.sql", 'an install script for the default version exists');

foreach my $script (glob 'hoplock--*.sql')
{
	like(slurp_file($script), qr/^\\echo Use "(CREATE|ALTER) EXTENSION hoplock.*" to load this file\. \\quit$/m,
		"$script has the \\echo ... \\quit guard");
}

my ($data) = slurp_file('Makefile') =~ /^DATA\s*=\s*(.*)$/m;
foreach my $script (glob 'hoplock--*.sql')
{
	like($data, qr/(^|\s)\Q$script\E(\s|$)/, "the Makefile installs $script");
}

done_testing();
